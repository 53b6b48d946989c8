"""Regressions for issue 14's core items: late beats, restart, topic churn, huge settings,
long gaps without the local-pause guard. Manual clock throughout; no sleeps."""

from __future__ import annotations

import pytest

import heartwire as hw
from tests.conftest import Rig, ms


def summary(events: list[hw.core.Event]) -> list[tuple[str, str, int, int]]:
    return [(e.kind, e.topic, e.missed, ms(e.at)) for e in events]


# -- item 5: a beat older than what is known does not move the state backwards -------------


def failed_three_times(rig: Rig) -> None:
    """svc.a heard at 0.2, FAILED since 1.2, failed(3) at 3.2, the detector run to 3.5."""
    rig.det.add("svc.a", now=0.0)
    assert rig.det.beat("svc.a", now=0.2)
    rig.clock.set(3.5)
    assert summary(rig.take()) == [
        ("failed", "svc.a", 1, 1200),
        ("failed", "svc.a", 2, 2200),
        ("failed", "svc.a", 3, 3200),
    ]


@pytest.mark.parametrize("late", [0.1, 0.9, 1.2, 2.0, 3.2])
def test_a_beat_older_than_the_last_missed_deadline_does_not_end_the_outage(
    rig: Rig, late: float
) -> None:
    failed_three_times(rig)
    assert rig.det.beat("svc.a", now=late)  # recorded (counted), but it is old news
    assert rig.take() == [], "no resumed, no repeated failed"
    st = rig.det.status("svc.a")
    assert (st.state, st.missed, ms(st.failed_since)) == ("FAILED", 3, 1200)
    assert ms(st.last_seen) == max(200, ms(late))
    rig.clock.set(4.201)  # the count goes on where it was
    assert summary(rig.take()) == [("failed", "svc.a", 4, 4200)]
    assert rig.det.stats()["resumed"] == 0


def test_a_late_beat_after_the_last_missed_deadline_ends_the_outage_once(rig: Rig) -> None:
    failed_three_times(rig)
    assert rig.det.beat("svc.a", now=3.3)  # after the last counted deadline (3.2)
    [ev] = rig.take()
    assert (ev.kind, ev.missed, ms(ev.at), ms(ev.downtime)) == ("resumed", 3, 3300, 2100)
    rig.clock.set(4.3)  # due at 4.3: on time, nothing
    assert rig.take() == []
    rig.clock.set(4.301)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 4300)]


def test_a_late_beat_while_paused_failed_is_not_a_recovery(rig: Rig) -> None:
    failed_three_times(rig)
    assert rig.det.pause("svc.a")
    assert rig.det.beat("svc.a", now=2.0)  # older than the last missed deadline
    rig.clock.set(5.0)
    assert rig.det.resume("svc.a")
    assert rig.take() == [], "the old beat is no recovery to report"
    st = rig.det.status("svc.a")
    assert (st.state, st.missed, ms(st.failed_since)) == ("FAILED", 3, 1200)
    rig.clock.set(6.001)
    assert summary(rig.take()) == [("failed", "svc.a", 4, 6000)]


def test_an_older_beat_of_a_live_topic_changes_nothing(rig: Rig) -> None:
    rig.det.add("svc.a", now=0.0)
    assert rig.det.beat("svc.a", now=0.5)
    rig.clock.set(0.8)
    assert rig.det.beat("svc.a", now=0.1)
    st = rig.det.status("svc.a")
    assert (st.state, ms(st.last_seen), ms(st.next_deadline)) == ("ALIVE", 500, 1500)
    rig.clock.set(1.501)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 1500)]


# -- item 6: stop() then start() keeps what is known --------------------------------------


def test_a_restart_keeps_a_failed_topic_failed_with_its_since_and_count(rig: Rig) -> None:
    rig.det.add("svc.a", now=0.0)
    rig.clock.set(2.5)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 1000), ("failed", "svc.a", 2, 2000)]
    rig.det.stop()
    rig.clock.set(10.0)
    rig.det.start()
    st = rig.det.status("svc.a")
    assert (st.state, st.missed, ms(st.failed_since)) == ("FAILED", 2, 1000)
    assert ms(st.next_deadline) == 11_000  # the count goes on from the restart
    rig.clock.set(11.001)
    [ev] = rig.take()
    assert (ev.kind, ev.missed, ms(ev.at), ms(ev.since)) == ("failed", 3, 11_000, 1000)
    assert rig.det.beat("svc.a")
    [ev] = rig.take()
    assert (ev.kind, ev.missed, ms(ev.downtime)) == ("resumed", 3, 10_001)


def test_a_restart_keeps_alive_pending_and_paused_topics_as_they_were(rig: Rig) -> None:
    rig.det.add("alive", now=0.0)
    rig.det.add("pending", now=0.0)
    rig.det.add("paused", now=0.0)
    assert rig.det.beat("alive", now=0.5)
    assert rig.det.pause("paused")
    rig.det.stop()
    rig.clock.set(10.0)
    rig.det.start()
    states = {s.topic: s.state for s in rig.det.statuses()}
    assert states == {"alive": "ALIVE", "pending": "PENDING", "paused": "PAUSED"}
    rig.clock.set(11.001)
    assert sorted(summary(rig.take())) == [
        ("failed", "alive", 1, 11_000),
        ("failed", "pending", 1, 11_000),
    ]
    assert rig.det.status("paused").state == "PAUSED"


def test_a_restart_keeps_a_topic_paused_while_failed_for_resume(rig: Rig) -> None:
    rig.det.add("svc.a", now=0.0)
    rig.clock.set(1.5)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 1000)]
    assert rig.det.pause("svc.a")
    rig.det.stop()
    rig.clock.set(5.0)
    rig.det.start()
    assert rig.det.status("svc.a").state == "PAUSED"
    assert rig.det.resume("svc.a")
    st = rig.det.status("svc.a")
    assert (st.state, st.missed, ms(st.failed_since)) == ("FAILED", 1, 1000)
    rig.clock.set(6.001)
    assert summary(rig.take()) == [("failed", "svc.a", 2, 6000)]


def test_a_beat_while_stopped_is_refused_and_the_topic_stays_failed(rig: Rig) -> None:
    """(A beat recorded but not settled when stop() comes is the Rust test
    ``stop_takes_in_a_recorded_beat_before_it_stops_a_failed_topic``.)"""
    h = rig.det.add("svc.a", now=0.0)
    rig.clock.set(1.5)
    rig.take()
    rig.det.stop()
    assert not rig.det.beat(h)  # refused while stopped: nothing heard
    rig.det.start()
    assert rig.det.status(h).state == "FAILED"


def test_a_monitor_paused_then_restarted_watches_its_topics_again() -> None:
    """The detector keeps pauses across a restart; the monitor's whole pause ends at stop()."""
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(hw.connect(), "svc.>", clock=clock)
    mon.start()
    mon.expect("svc.a")
    mon.expect("svc.b")
    assert mon.pause("svc.b")  # one by one: kept across the restart
    assert mon.pause()
    mon.stop()
    mon.start()
    assert mon.status("svc.a").state.value == "PENDING"
    assert mon.status("svc.b").state.value == "PAUSED"
    mon.stop()


# -- item 7: removed topics are freed -------------------------------------------------------


def test_churn_keeps_counts_limits_and_memory_bounded(rig: Rig) -> None:
    rig.det.add("steady")
    warm = None
    for i in range(20_000):
        h = rig.det.add(f"churn.{i % 7}.{i}")
        assert rig.det.beat(h)
        rig.det.remove(h)
        rig.take()  # a consumer keeps up
        if i == 1000:
            warm = rig.det.heap_bytes()
    assert len(rig.det) == 1
    assert rig.det.stats()["topics"] == 1
    assert rig.det.counts()["REMOVED"] <= 1  # the last one, its slot free for the next
    assert warm is not None
    assert rig.det.heap_bytes() <= warm + 64 * 1024, (warm, rig.det.heap_bytes())


def test_a_monitor_watching_nothing_after_churn_still_learns(rig: Rig) -> None:
    mon = hw.HeartbeatMonitor(hw.connect(), "svc.>", clock=rig.clock, max_topics=10)
    mon.start()
    slots = set()
    for i in range(2000):
        assert mon.beat(f"svc.{i}"), f"svc.{i} refused: {mon.stats()['rejected']}"
        handle = mon.handle(f"svc.{i}")
        assert handle is not None
        slots.add(handle & 0xFFFF_FFFF)
        assert mon.remove(f"svc.{i}")
    assert mon.metrics()["topics"] == 0
    assert mon.stats()["rejected"] == {}
    assert len(slots) <= 2, f"slots are reused: {sorted(slots)[:10]}"
    # A reused slot's handle has a generation: the monitor's per-topic state follows the slot.
    assert mon.beat("svc.last")
    assert mon.expect("svc.last", period=2.0) == mon.handle("svc.last")
    assert mon.status("svc.last").period == 2.0
    assert mon.pause()
    assert mon.status("svc.last").state.value == "PAUSED"
    assert mon.resume()
    assert mon.status("svc.last").state.value == "ALIVE"
    mon.stop()


def test_queued_events_keep_naming_their_topic_after_its_slot_is_reused(rig: Rig) -> None:
    old = rig.det.add("svc.old", now=0.0)
    rig.clock.set(1.001)  # svc.old fails: the event waits in the queue
    rig.det.remove(old)
    new = [rig.det.add(f"svc.new{i}") for i in range(3)]
    [ev] = rig.take()
    assert (ev.kind, ev.topic, ev.handle) == ("failed", "svc.old", old)
    # Once the queue is drained the slot may be reused, under a new handle.
    again = rig.det.add("svc.again")
    assert again not in [old, *new]
    assert len(rig.det) == 4
    rig.clock.set(2.002)
    names = sorted((e.topic, e.handle) for e in rig.take())
    assert ("svc.again", again) in names
    assert all(topic != "svc.old" for topic, _ in names)


def test_a_stale_handle_never_reaches_the_topic_that_reuses_its_slot(rig: Rig) -> None:
    handles = []
    for i in range(50):  # enough churn for some slot to be reused
        h = rig.det.add(f"svc.{i}")
        handles.append(h)
        rig.det.remove(h)
        rig.take()
    live = rig.det.add("svc.live")
    assert live not in handles
    for h in handles:
        assert not rig.det.beat(h)
        with pytest.raises(KeyError):
            rig.det.status(h)
        with pytest.raises(KeyError):
            rig.det.pause(h)
    assert rig.det.beat_handles(handles) == 0
    assert rig.det.status("svc.live").state == "PENDING"
    assert rig.det.status(live).topic == "svc.live"


# -- item 9: settings at the top of the range never spin the detector -----------------------

_HUGE = """
import heartwire as hw
clock = hw.ManualClock()
det = hw.core.Detector(clock=clock, period=1.8e10, grace=1.8e10, resolution=1e-9)
q = det.subscribe()
h = det.add("svc.far")
det.add("svc.near", period=1.0, grace=0.0)
det.beat(h)
clock.set(1.0)
clock.set(2.5)
det.remove("svc.near")  # (long gaps for short periods: see the tests below)
clock.set(1e9)
clock.set(1.7e10)
print(det.status(h).state, det.status(h).next_deadline, [e.topic for e in q.try_pop()])
"""


def test_a_deadline_past_the_end_of_the_range_never_fires_nor_spins() -> None:
    import subprocess
    import sys

    try:
        out = subprocess.run(
            [sys.executable, "-c", _HUGE], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the detector spun: advance() did not return within 20 s")
    assert out.returncode == 0, out.stderr
    state, deadline, topics = out.stdout.split(" ", 2)
    assert state == "ALIVE"
    assert float(deadline) >= 1.8e10
    assert "svc.far" not in topics and "svc.near" in topics


# -- risky spot: a long gap with no local-pause guard does bounded work ----------------------


def test_a_long_gap_gives_a_bounded_number_of_failed_events_with_the_exact_count() -> None:
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=0.001, max_local_pause=None)
    q = det.subscribe(capacity=1 << 20)
    det.add("svc.a")
    clock.set(1000.0)  # 999 999 periods missed (the one ending at 1000.0 is not over yet)
    events = q.try_pop(1 << 20)
    assert len(events) == 64, len(events)
    assert [e.missed for e in events[:63]] == list(range(1, 64))
    assert [ms(e.at) for e in events[:63]] == list(range(1, 64))
    last = events[-1]
    assert (last.kind, last.missed, ms(last.at), ms(last.since)) == ("failed", 999_999, 999_999, 1)
    st = det.status("svc.a")
    assert (st.missed, ms(st.next_deadline)) == (999_999, 1_000_000)
    clock.set(1000.0105)  # a short step: every period has its event again
    assert [e.missed for e in q.try_pop()] == list(range(1_000_000, 1_000_011))


def test_a_long_gap_below_allowed_misses_is_counted_without_walking_it() -> None:
    clock = hw.ManualClock()
    det = hw.core.Detector(
        clock=clock, period=0.001, allowed_misses=1_000_000, max_local_pause=None
    )
    q = det.subscribe()
    det.add("svc.a")
    clock.set(999.9995)  # 999 999 missed: one short of failing
    assert q.try_pop() == []
    assert det.status("svc.a").missed == 999_999
    clock.set(2000.0)
    events = q.try_pop()
    assert len(events) == 64
    first, last = events[0], events[-1]
    assert (first.missed, ms(first.at), ms(first.since)) == (1_000_000, 1_000_000, 1_000_000)
    assert (last.missed, ms(last.at), ms(last.since)) == (1_999_999, 1_999_999, 1_000_000)


def test_a_restart_stamped_in_the_past_does_not_count_the_time_stopped(rig: Rig) -> None:
    rig.det.add("svc.a", now=0.0)
    assert rig.det.beat("svc.a", now=0.5)
    rig.det.stop()
    rig.clock.set(10.0)
    rig.det.start(now=2.0)  # older than the detector's last run (10.0)
    rig.clock.set(10.9)
    assert rig.take() == [], "nothing due for the time stopped"
    rig.clock.set(11.001)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 11_000)]


def test_a_late_beat_stamped_while_stopped_does_not_end_a_held_outage(rig: Rig) -> None:
    """R1 F4 (B): FAILED when stopped at 5, restarted at 100, then a beat stamped 50."""
    rig.det.add("svc.a", now=0.0)
    rig.clock.set(5.0)
    assert len(rig.take()) == 4
    rig.det.stop()
    rig.clock.set(100.0)
    rig.det.start()
    assert rig.det.beat("svc.a", now=50.0)  # recorded, but the topic was FAILED up to 100
    rig.clock.set(100.5)
    assert rig.take() == [], "no resumed at 50, no failed for every period of 50..100"
    st = rig.det.status("svc.a")
    assert (st.state, st.missed, ms(st.failed_since), ms(st.last_seen)) == (
        "FAILED",
        4,
        1000,
        50_000,
    )
    rig.clock.set(101.001)
    assert summary(rig.take()) == [("failed", "svc.a", 5, 101_000)]


def test_a_late_beat_stamped_while_stopped_does_not_count_the_time_stopped(rig: Rig) -> None:
    """R1 F4 (D): ALIVE when stopped (beat 4.5), restarted at 100, then a beat stamped 50."""
    rig.det.add("svc.a", now=0.0)
    rig.clock.set(4.5)
    assert rig.det.beat("svc.a")
    rig.clock.set(5.0)
    rig.take()
    rig.det.stop()
    rig.clock.set(100.0)
    rig.det.start()
    assert rig.det.beat("svc.a", now=50.0)
    rig.clock.set(101.0)
    assert rig.take() == []
    rig.clock.set(101.5)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 101_000)]


def test_a_late_beat_stamped_while_paused_is_old_news_after_the_resume(rig: Rig) -> None:
    """The same for one topic paused 1..100: FAILED svc.a stays FAILED, ALIVE svc.b gets one
    period from the resume."""
    rig.det.add("svc.a", now=0.0)
    rig.det.add("svc.b", now=0.0)
    assert rig.det.beat("svc.b", now=0.5)
    rig.clock.set(1.2)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 1000)]
    assert rig.det.pause("svc.a") and rig.det.pause("svc.b")
    rig.clock.set(100.0)
    assert rig.det.resume("svc.a") and rig.det.resume("svc.b")
    assert rig.det.beat("svc.a", now=50.0) and rig.det.beat("svc.b", now=50.0)
    rig.clock.set(101.001)
    assert sorted(summary(rig.take())) == [
        ("failed", "svc.a", 2, 101_000),
        ("failed", "svc.b", 1, 101_000),
    ]


def test_resume_or_a_period_change_stamped_in_the_past_never_fires_in_the_past(rig: Rig) -> None:
    rig.det.add("svc.a", now=0.0)
    rig.det.add("svc.b", now=0.0)
    assert rig.det.pause("svc.a")
    rig.clock.set(0.5)
    rig.det.set_period("svc.b", 2.0, now=0.1)  # older than the last run (0.5): from 0.5
    rig.clock.set(10.0)
    assert [ms(e.at) for e in rig.take()] == [2500, 4500, 6500, 8500]
    assert rig.det.resume("svc.a", now=1.0)  # older than the last run (10.0): from 10.0
    rig.clock.set(11.001)
    assert [x for x in summary(rig.take()) if x[1] == "svc.a"] == [("failed", "svc.a", 1, 11_000)]
