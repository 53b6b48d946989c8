"""``heartwire status`` and the alerting policy (issue 17): the recent events show an alert
released later (a silence that ends, a parent that resumes, a flap that settles while down:
``at`` after ``since``), flapping, and marked events as such, still not the repeats; the
offenders say which are silenced or suppressed now. Manual clock, exact rings."""

from __future__ import annotations

import pytest

import heartwire as hw
from heartwire.status import RecentEvents, status_snapshot

WALL = 1_800_000_000.0


@pytest.fixture
def clock() -> hw.ManualClock:
    return hw.ManualClock(0.0)


def monitor(clock: hw.ManualClock, recent: RecentEvents, **kw: object) -> hw.HeartbeatMonitor:
    return hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0, clock=clock, listeners=[recent], wall_offset=WALL,
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.fixture
def recent() -> RecentEvents:
    return RecentEvents(capacity=20)


def ring(recent: RecentEvents) -> list[tuple[str, str, float, str]]:
    return [(e.kind, e.topic, round(e.at - WALL, 3), e.detail) for e in recent.events()]


def test_a_silence_that_ends_while_failed_shows_the_released_alert(
    clock: hw.ManualClock, recent: RecentEvents
) -> None:
    mon = monitor(clock, recent)
    try:
        mon.expect("svc.db")
        mon.start()
        mon.silence("svc.db", duration=2.5, reason="upgrade")
        clock.set(3.2)  # failed 1.0, 2.0 silenced; released at 2.5; 3.0 a repeat
        mon.beat("svc.db")
        assert mon.drain()
        assert ring(recent) == [
            ("failed", "svc.db", 1.0, "missed 1 (silenced)"),
            ("failed", "svc.db", 2.5, "missed 2, down for 1.5 s"),
            ("resumed", "svc.db", 3.2, "after 2.2 s, missed 3"),
        ]
    finally:
        mon.stop()


def test_a_parent_that_resumes_first_shows_its_childs_released_alert(
    clock: hw.ManualClock, recent: RecentEvents
) -> None:
    mon = monitor(clock, recent)
    try:
        mon.expect("svc.db")
        mon.expect("svc.api")
        mon.depends("svc.api", on="svc.db")
        mon.start()
        clock.set(1.5)
        assert mon.drain()
        snap = status_snapshot(mon, recent=recent)
        marks = {o.topic: (o.silenced, o.suppressed_by) for o in snap.offenders}
        assert marks == {"svc.db": (False, None), "svc.api": (False, "svc.db")}
        mon.beat("svc.db")  # back at 1.5: svc.api, still down, alerts now
        clock.set(2.5)  # svc.api's repeat at 2.0: left out
        assert mon.drain()
        assert sorted(ring(recent)[:2]) == [
            ("failed", "svc.api", 1.0, "missed 1 (suppressed by svc.db)"),
            ("failed", "svc.db", 1.0, "missed 1"),
        ]
        assert ring(recent)[2:] == [
            ("resumed", "svc.db", 1.5, "after 500 ms, missed 1"),
            ("failed", "svc.api", 1.5, "missed 1, down for 500 ms"),
        ]
        assert status_snapshot(mon).offenders[0].suppressed_by is None  # parent is back
    finally:
        mon.stop()


def test_flapping_and_the_failure_it_settles_with_are_shown(
    clock: hw.ManualClock, recent: RecentEvents
) -> None:
    mon = monitor(clock, recent, flap_threshold=2, flap_window=10.0)
    try:
        mon.expect("svc.worker")
        mon.start()
        for n in range(3):  # three outages: down at n*1.5 + 1.0, back at n*1.5 + 1.5
            clock.set(n * 1.5 + 1.1)
            clock.set(n * 1.5 + 1.5)
            mon.beat("svc.worker")
        clock.set(16.2)  # down for good since 5.5 (held), settled at 15.5; a repeat at 16.0
        assert mon.drain()
        assert ring(recent)[-4:] == [
            ("failed", "svc.worker", 4.0, "missed 1"),
            ("flapping", "svc.worker", 4.5, "started flapping (3 outages): alerts held back"),
            ("flapping", "svc.worker", 15.5, "stopped flapping"),
            ("failed", "svc.worker", 15.5, "missed 11, down for 10.0 s"),
        ]
    finally:
        mon.stop()


def test_silenced_offenders_are_marked_in_the_table(
    clock: hw.ManualClock, recent: RecentEvents
) -> None:
    from rich.console import Console

    from heartwire.status_view import render

    mon = monitor(clock, recent)
    try:
        mon.expect("svc.db.main")
        mon.expect("svc.web")
        mon.start()
        mon.silence("svc.db.>", duration=60.0, reason="migration")
        clock.set(1.5)
        assert mon.drain()
        snap = status_snapshot(mon, recent=recent)
        assert {o.topic: o.silenced for o in snap.offenders} == {
            "svc.db.main": True,
            "svc.web": False,
        }
        console = Console(record=True, width=140, color_system=None)
        console.print(render(snap))
        lines = console.export_text().splitlines()
        db = next(line for line in lines if "svc.db.main" in line and "FAILED" in line)
        web = next(line for line in lines if "svc.web" in line and "FAILED" in line)
        assert db.rstrip(" │|").endswith("silenced"), db
        assert "silenced" not in web, web
        assert any("migration" in line for line in lines)
    finally:
        mon.stop()


def test_a_burst_with_marks_still_costs_the_ring_its_capacity(clock: hw.ManualClock) -> None:
    recent = RecentEvents(capacity=5, max_held=100)
    mon = monitor(clock, recent)
    try:
        names = [f"svc.t{i:04d}" for i in range(2000)]
        mon.start()
        mon.silence("svc.>", duration=1.7)
        mon.beat_many(names)
        clock.set(1.5)  # all 2000 fail at 1 s, silenced; the ring keeps the newest 5
        assert mon.drain()
        assert [e.topic for e in recent.events()] == names[-5:]
        clock.set(1.8)  # the silence ends at 1.7: 2000 released alerts; the ring: the last 5
        assert mon.drain()
        kept = recent.events()
        assert [(e.topic, round(e.at - WALL, 3)) for e in kept] == [(n, 1.7) for n in names[-5:]]
        assert all(e.detail == "missed 1, down for 700 ms" for e in kept)
        assert len(recent._held) <= 100  # the bound on outages noted
    finally:
        mon.stop()


def test_max_held_is_checked() -> None:
    with pytest.raises(ValueError, match="max_held"):
        RecentEvents(max_held=0)


def test_a_flap_that_settles_up_is_let_go_and_batches_are_cheap_again(
    clock: hw.ManualClock, recent: RecentEvents
) -> None:
    """Second review of issue 17: a topic that stopped flapping while up (no failed follows),
    then removed, was kept in RecentEvents' settled set for ever (and every later batch read
    whole for it)."""
    # Not held: every outage was resolved for the listeners, so the settle owes nothing.
    mon = monitor(clock, recent, flap_threshold=2, flap_window=10.0, flap_hold=False)
    try:
        mon.expect("svc.worker")
        mon.expect("svc.other", period=100.0)
        mon.start()
        for n in range(3):  # three outages, the last ending at 4.5
            clock.set(n * 1.5 + 1.1)
            clock.set(n * 1.5 + 1.5)
            mon.beat("svc.worker")
        for k in range(22):  # up, beating, through the settle at 14.5
            clock.set(4.5 + (k + 1) * 0.5)
            mon.beat("svc.worker")
        assert mon.drain()
        assert ring(recent)[-1] == ("flapping", "svc.worker", 14.5, "stopped flapping")
        assert mon.remove("svc.worker")
        clock.set(100.5)  # svc.other fails: a later batch
        assert mon.drain()
        assert ring(recent)[-1] == ("failed", "svc.other", 100.0, "missed 1")
        assert recent._settled == {}
    finally:
        mon.stop()
