"""Second review of issue 17, finding 7: maintenance windows on the real clock map wall time
to the monitor's (monotonic) clock with an offset that drifts: the monotonic clock stops while
the host is suspended, the wall clock may be stepped. Windows reads the offset again at each
top-up and every minute; when it moved by more than a second, the occurrences registered ahead
are placed again. Driven here through a real core Detector on a manual clock, the offset a
function the test moves (as a suspend or a step would)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

import heartwire as hw
import heartwire.monitor as monitor_module
from heartwire.maintenance import OFFSET_CHECK, Windows

UTC = dt.timezone.utc
START = dt.datetime(2026, 6, 5, tzinfo=UTC).timestamp()  # a Friday, 00:00 UTC


def _rig() -> tuple[hw.ManualClock, hw.core.Detector, list[float], Windows]:
    clock = hw.ManualClock(0.0)
    det = hw.core.Detector(clock=clock, period=1.0)
    offset = [START]

    def silence(pattern: str, start: float | None, end: float, reason: str) -> int:
        return det.silence(pattern, end, start=start, reason=reason)

    windows = Windows(silence, det.unsilence, det.now, START, lambda: offset[0])
    return clock, det, offset, windows


def _walls(det: hw.core.Detector, offset: float) -> list[tuple[str, str]]:
    def hhmm(t: float) -> str:
        return dt.datetime.fromtimestamp(t + offset, UTC).strftime("%a %H:%M")

    return [(hhmm(s), hhmm(e)) for _, _, s, e, _ in sorted(det.silences(), key=lambda x: x[2])]


def test_a_wall_clock_step_places_the_occurrences_ahead_again() -> None:
    clock, det, offset, windows = _rig()
    windows.add("svc.>", start="02:00", end="03:00", tz="UTC")
    assert _walls(det, offset[0])[:2] == [("Fri 02:00", "Fri 03:00"), ("Sat 02:00", "Sat 03:00")]
    # The host slept an hour: the monotonic clock stood still while the wall clock went on.
    offset[0] += 3600.0
    clock.set(OFFSET_CHECK)
    assert windows.due(det.now())  # the minute's check comes even with no occurrence over
    windows.top_up()
    # Every occurrence registered starts at 02:00 wall time again (by the new offset).
    assert _walls(det, offset[0])[:2] == [("Fri 02:00", "Fri 03:00"), ("Sat 02:00", "Sat 03:00")]
    assert len(det.silences()) == 8  # none lost, none doubled


def test_an_occurrence_in_progress_keeps_its_times_and_a_small_move_changes_nothing() -> None:
    clock, det, offset, windows = _rig()
    windows.add("svc.>", start="00:00", end="03:00", tz="UTC")  # in progress from the start
    before = det.silences()
    offset[0] += 0.5  # NTP slewing: under a second
    clock.set(OFFSET_CHECK)
    windows.top_up()
    assert det.silences()[: len(before)] == before  # (and the next day's, come within reach)
    before = det.silences()
    offset[0] -= 1800.0  # a step back by half an hour
    clock.set(2 * OFFSET_CHECK)
    windows.top_up()
    now = det.silences()
    assert now[0] == before[0]  # the one in progress: not ended (that would release alerts)
    # The rest placed again: the next 7 days at 00:00 by the new offset (the 8th day's is
    # beyond the horizon now that the wall clock reads half an hour less).
    days = ["Sat", "Sun", "Mon", "Tue", "Wed", "Thu", "Fri"]
    assert _walls(det, offset[0])[1:] == [(f"{d} 00:00", f"{d} 03:00") for d in days]


def test_a_fixed_offset_is_never_read_again() -> None:
    clock = hw.ManualClock(0.0)
    det = hw.core.Detector(clock=clock, period=1.0)
    windows = Windows(
        lambda p, s, e, r: det.silence(p, e, start=s, reason=r), det.unsilence, det.now, START
    )
    windows.add("svc.>", start="02:00", end="03:00", tz="UTC")
    clock.set(OFFSET_CHECK)
    assert not windows.due(det.now())  # a ManualClock's (fixed) offset: no minute check


def test_a_real_clock_monitor_hands_windows_the_offset_to_read_again() -> None:
    mon = hw.HeartbeatMonitor(None, "svc.>")
    fixed = hw.HeartbeatMonitor(None, "svc.>", clock=hw.ManualClock())
    assert callable(mon._windows._read_offset) and fixed._windows._read_offset is None


def test_a_step_back_does_not_run_an_occurrence_already_over_again() -> None:
    """Third review of issue 17, finding 4: with no occurrence kept, the horizon was reset to
    -inf, so a wall clock stepped back past an occurrence's end registered it again (the
    02:00-03:00 window silenced a second hour)."""
    clock, det, offset, windows = _rig()
    windows.add("svc.>", start="02:00", end="03:00", tz="UTC")
    clock.set(3 * 3600.0 + 30.0)  # wall Fri 03:00:30: Friday's occurrence is over
    windows.top_up()
    offset[0] -= 3600.0  # the wall clock is stepped back an hour: it reads 02:00:30 again
    clock.set(3 * 3600.0 + 90.0)
    windows.top_up()
    now = det.now()
    in_force = [s for s in det.silences() if s[2] <= now < s[3]]
    assert in_force == [], f"Friday's occurrence, over already, was registered again: {in_force}"
    # The ones ahead are placed again by the new offset, none lost.
    assert _walls(det, offset[0])[:2] == [("Sat 02:00", "Sat 03:00"), ("Sun 02:00", "Sun 03:00")]


def test_a_silence_until_a_time_reads_back_that_time_after_the_offset_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Third review of issue 17, finding 2: silence(until=T) placed its end with the offset
    read now, but the Silence returned, silences(), status and events mapped it back with the
    offset taken at construction (T minus an hour after a suspend of an hour)."""
    mon = hw.HeartbeatMonitor(None, "svc.>")
    real = monitor_module.real_clock_offset
    monkeypatch.setattr(monitor_module, "real_clock_offset", lambda: real() + 3600.0)
    until = dt.datetime.now(UTC).replace(microsecond=0) + dt.timedelta(hours=5)
    made = mon.silence("svc.a", until=until)
    listed = [s for s in mon.silences() if s.id == made.id]
    assert abs(made.wall_end - until.timestamp()) < 1.0, (
        f"silence(until={until.isoformat()}) reads back {made.end_utc.isoformat()}"
    )
    assert listed and abs(listed[0].wall_end - until.timestamp()) < 1.0
    # Every wall time shown from now on uses the offset as it moved.
    assert abs(mon.wall_offset - (real() + 3600.0)) < 1.0
    assert abs(mon.wall_time(mon.now()) - (time.time() + 3600.0)) < 1.0
