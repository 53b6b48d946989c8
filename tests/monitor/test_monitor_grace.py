"""The monitor's grace under the manual clock: slack on every deadline, 10% of the period by
default, following each topic's period."""

from __future__ import annotations

import pytest

from heartwire.monitor import HeartbeatMonitor, HeartbeatSubscriber
from tests.monitor.test_monitor_semantics import make_rig, ms


def test_a_beat_5ms_late_on_a_200ms_period_is_not_a_failure_by_default() -> None:
    for r in make_rig(grace=None):
        r.mon.start()
        r.take()
        r.send("svc.a", seq=0, period=0.2)  # learned at 0.0 with the publisher's period
        assert r.mon.status("svc.a").grace == pytest.approx(0.02)
        for seq in range(1, 51):
            # Every beat 5 ms after its exact deadline, and the monitor looks in between.
            assert r.advance(0.2) == []
            assert r.advance(0.005) == []
            r.send("svc.a", seq=seq, period=0.2)
        assert r.take() == []
        assert r.mon.stats()["failed"] == 0


def test_the_same_late_beats_fail_with_grace_zero() -> None:
    for r in make_rig(grace=0.0):
        r.mon.start()
        r.take()
        r.send("svc.a", period=0.2)
        assert r.advance(0.205) == [("failed", "svc.a", 1, 200, 200)]


def test_the_nth_deadline_is_last_beat_plus_n_periods_plus_grace() -> None:
    for r in make_rig(grace=None, period=1.0):
        r.mon.expect("svc.a")
        r.mon.start()
        r.take()
        # Never heard: fails at start + period + grace, and `at`/`since` are that deadline.
        assert r.advance(1.1) == []
        assert r.advance(0.001) == [("failed", "svc.a", 1, 1100, 1100)]
        assert r.advance(2.0) == [
            ("failed", "svc.a", 2, 2100, 1100),
            ("failed", "svc.a", 3, 3100, 1100),
        ]
        r.send("svc.a")  # at 3.101, period still 1.0 (the beat carries none)
        assert r.take() == [("resumed", "svc.a", 3, 3101, 2001)]
        st = r.mon.status("svc.a")
        assert ms(st.next_deadline) == 4201
        assert st.grace == pytest.approx(0.1)


def test_grace_follows_learned_and_expected_periods_unless_given() -> None:
    for r in make_rig(grace=None):
        r.mon.start()
        r.send("svc.a", period=0.5)
        assert r.mon.status("svc.a").grace == pytest.approx(0.05)
        r.send("svc.a", period=2.0)  # the publisher slowed down: the grace follows
        assert r.mon.status("svc.a").grace == pytest.approx(0.2)
        r.mon.expect("svc.a", period=4.0)
        assert r.mon.status("svc.a").grace == pytest.approx(0.4)
        r.mon.expect("svc.b", grace=0.03)  # given: kept whatever the period
        r.send("svc.b", period=3.0)
        st = r.mon.status("svc.b")
        assert st.period == 3.0
        assert st.grace == pytest.approx(0.03)
        r.mon.expect("svc.a", grace=0.0)
        r.send("svc.a", period=1.0)  # not learned: svc.a's period was given to expect()
        assert r.mon.status("svc.a").grace == 0.0


def test_a_fixed_grace_applies_to_every_topic() -> None:
    for r in make_rig(grace=0.25, period=1.0):
        assert r.mon.grace == 0.25
        r.mon.expect("svc.a", period=3.0)
        r.mon.start()
        r.take()
        r.send("svc.b", period=0.1)
        assert {s.topic: s.grace for s in r.mon.statuses()} == {"svc.a": 0.25, "svc.b": 0.25}
        assert r.advance(0.35) == []
        assert r.advance(0.001) == [("failed", "svc.b", 1, 350, 350)]


def test_defaults() -> None:
    mon = HeartbeatMonitor(None, "svc.>", period=2.0)
    assert mon.grace is None
    assert mon.detector.status(mon.expect("svc.a")).grace == pytest.approx(0.2)
    sub = HeartbeatSubscriber(None, "svc.b", period=0.3)
    assert sub.status().grace == pytest.approx(0.03)
