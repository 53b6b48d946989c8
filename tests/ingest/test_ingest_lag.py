"""The ingest-lag guard (issue 15) under the manual clock: an intake that falls behind its feed,
simulated by a reader that records the beats it reads at the clock and tells the detector
after each read (``Detector.note_intake``) whether it was backlogged and the transit of the
freshest beat read."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

import heartwire as hw
from heartwire._core import Detector, Event, EventQueue
from heartwire.events import CaughtUp, Failed, Lagging
from heartwire.monitor import HeartbeatMonitor
from heartwire.transport.memory import MemoryBroker
from tests.monitor.test_monitor_semantics import Recorder

STEP = 100  # ms


def ramp(t: int) -> int:
    """The intake's lag (ms) at ``t`` (ms): none up to 5 s, growing to 2 s at 7 s (it reads
    nothing meanwhile), 2 s up to 12 s, read up by 13 s (reading at three times the feed)."""
    if t <= 5000:
        return 0
    if t <= 7000:
        return t - 5000
    if t <= 12000:
        return 2000
    if t <= 13000:
        return 2 * (13000 - t)
    return 0


class Feed:
    """Publishers beating at whole seconds (each topic up to its last beat's send time), read by
    an intake ``lag(t)`` behind the clock. ``beat(names)`` records what one read took in."""

    def __init__(
        self,
        clock: hw.ManualClock,
        note: Callable[..., None],
        beat: Callable[[list[str]], Any],
        topics: dict[str, float],
        *,
        transit: bool = True,
    ) -> None:
        self.clock, self.note, self.beat = clock, note, beat
        self.topics = topics
        self.read = round(clock.now() * 1000)  # ms: up to when the intake has read
        self.transit = transit

    def run(
        self, until: float, lag: Callable[[int], int], each: Callable[[], None] = lambda: None
    ) -> None:
        while round(self.clock.now() * 1000) < round(until * 1000):
            self.clock.advance(STEP / 1000)  # the driver runs: deadlines judged
            t = round(self.clock.now() * 1000)
            upto = t - lag(t)
            assert upto >= self.read, "the simulated intake never reads backwards"
            read = [
                name
                for k in range(self.read // 1000 + 1, upto // 1000 + 1)
                for name, last in self.topics.items()
                if k <= last
            ]
            if read:
                self.beat(read)
            self.read = upto
            behind = t - upto
            transit = behind / 1000 if self.transit and behind > 0 else None
            self.note(behind > 0, transit)
            each()


def failed(events: Iterable[Event]) -> list[tuple[str, int, float]]:
    return [(e.topic, e.missed, e.at) for e in events if e.kind == "failed"]


def rig(**kw: Any) -> tuple[hw.ManualClock, Detector, EventQueue]:
    clock = hw.ManualClock()
    det = Detector(clock=clock, **kw)
    return clock, det, det.subscribe(1 << 20)


NAMES = [f"live.{i:04d}" for i in range(1000)]


def test_a_lagging_intake_fails_no_live_topic_and_reports_the_dead_late() -> None:
    clock, det, q = rig()
    det.add_many([*NAMES, "dead", "late"])
    topics = dict.fromkeys(NAMES, float("inf")) | {"dead": 5, "late": 8}
    feed = Feed(clock, det.note_intake, det.beat_many, topics)
    lags: list[float] = []
    feed.run(20.0, ramp, lambda: lags.append(det.lag))
    events = q.try_pop(1 << 20)
    # No live topic failed. `dead`'s last beat, read at 5, made it due at 6: reported at its
    # deadline once the intake had read past 6, then every period. `late`'s last beat (sent at
    # 8) was read and recorded at 10: due at 11, reported once the watermark passed 11.
    assert sorted(failed(events)) == sorted(
        [("dead", k - 5, float(k)) for k in range(6, 20)]
        + [("late", k - 10, float(k)) for k in range(11, 20)]
    )
    lag_events = [e for e in events if e.kind in ("lagging", "caught_up")]
    assert [repr(e) for e in lag_events] == [
        "Event(lagging, at=6.1, lag=1.1)",
        "Event(caught_up, at=13, duration=7.9, max_lag=2.1)",
    ]
    assert lag_events[0].topic == "" and lag_events[0].handle == -1
    # The lag the detector reports follows the intake: 2 s in the plateau, 0 once read up.
    assert lags[round(10_000 / STEP) - 1] == pytest.approx(2.0)
    assert lags[-1] == 0.0
    assert det.stats()["lagging"] == 1 and det.stats()["ingest_lag_ns"] == 0


def test_without_the_guard_the_same_backlog_fails_every_live_topic() -> None:
    clock, det, q = rig(lag_threshold=None)
    assert det.lag_threshold is None
    det.add_many(NAMES)
    feed = Feed(clock, det.note_intake, det.beat_many, dict.fromkeys(NAMES, float("inf")))
    feed.run(20.0, ramp)
    events = q.try_pop(1 << 20)
    assert {topic for topic, _, _ in failed(events)} == set(NAMES)
    assert not [e for e in events if e.kind in ("lagging", "caught_up")]
    assert det.lag == 0.0


def test_legacy_beats_without_transit_hold_at_most_max_ingest_lag() -> None:
    clock, det, q = rig(max_ingest_lag=3.0)
    assert det.max_ingest_lag == 3.0
    det.add_many(NAMES)
    det.add("dead")
    topics = dict.fromkeys(NAMES, float("inf")) | {"dead": 0}
    feed = Feed(clock, det.note_intake, det.beat_many, topics, transit=False)
    # Behind by 2 s from 2 s to 10 s: nothing tells how far, the watermark stays where judging
    # stood when the backlog began (2.1) until it is 3 s behind the clock (5.1), then follows.
    feed.run(12.0, lambda t: 0 if t <= 2000 else min(t - 2000, 2000) if t <= 10000 else 0)
    events = q.try_pop(1 << 20)
    assert {topic for topic, _, _ in failed(events)} == {"dead"}
    # `dead` (never heard, due at 1) failed before the backlog; at 2 once the watermark passed
    # 2 (2.1, held); at 3, 4, ... 3 s late (the bound), and at 10, 11 once read up.
    got = failed(events)
    assert got[:2] == [("dead", 1, 1.0), ("dead", 2, 2.0)]
    assert [at for _, _, at in got] == [float(k) for k in range(1, 12)]
    assert len([e for e in events if e.kind == "lagging"]) == 1


def test_note_intake_and_the_settings_refuse_bad_values() -> None:
    clock, det, q = rig()
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"transit must be a finite number of seconds"):
            det.note_intake(True, bad)
    with pytest.raises(ValueError, match=r"now must be"):
        det.note_intake(True, 0.5, now=-1.0)
    with pytest.raises(ValueError, match=r"lag_threshold must be a finite number of seconds > 0"):
        det.lag_threshold = 0.0
    with pytest.raises(ValueError, match=r"max_ingest_lag must be a finite number of seconds > 0"):
        Detector(clock=clock, max_ingest_lag=-1.0)
    with pytest.raises(ValueError, match=r"lag_threshold must be .* got NaN"):
        Detector(clock=clock, lag_threshold=float("nan"))
    # A publisher clock ahead of the monitor's gives a negative transit: no lag, no error.
    clock.advance(5.0)
    det.note_intake(True, -3.0)
    assert det.lag == 0.0
    det.note_intake(False)
    assert q.try_pop() == []


class LagRecorder(Recorder):
    """Records the lag episodes too."""

    def on_lagging(self, event: Lagging) -> None:
        self.events.append(event)

    def on_caught_up(self, event: CaughtUp) -> None:
        self.events.append(event)


def test_the_monitor_reports_the_lag_not_failures() -> None:
    clock = hw.ManualClock()

    rec = LagRecorder()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock, listeners=[rec])
    assert mon.lag_threshold == 1.0
    names = [f"svc.{i:03d}" for i in range(200)]
    dead = {"svc.000", "svc.001"}
    topics = {n: 5.0 if n in dead else float("inf") for n in names}
    seen: list[dict[str, Any]] = []
    with mon:
        assert mon.beat_many(names) == 200  # learned at 0 (period 1 s, grace 0.1 s)
        feed = Feed(clock, mon.detector.note_intake, mon.beat_many, topics)
        feed.run(10.0, ramp)
        seen.append(mon.metrics())
        feed.run(20.0, ramp)
        assert mon.drain()
        events = list(rec.events)
        metrics = mon.metrics()
        stats = mon.stats()
        counts = mon.counts()
    lagging = [e for e in events if isinstance(e, Lagging)]
    caught_up = [e for e in events if isinstance(e, CaughtUp)]
    assert [(e.lag, e.at) for e in lagging] == [pytest.approx((1.1, 6.1))]
    assert lagging[0].wall_at == pytest.approx(lagging[0].at + mon.wall_offset)
    assert [(e.duration, e.max_lag, e.at) for e in caught_up] == [pytest.approx((7.9, 2.1, 13.0))]
    fails = [e for e in events if isinstance(e, Failed)]
    # Only the two that stopped: their last beats were read at 5, due at 6.1 (grace), and
    # each fails at its deadlines, the first once the intake had read past it (the clock 8.3).
    assert {e.topic for e in fails} == dead
    assert sorted({round(e.at, 3) for e in fails}) == [round(k + 0.1, 3) for k in range(6, 20)]
    assert seen[0]["ingest_lag"] == pytest.approx(2.0) and seen[0]["lagging"] == 1
    assert (metrics["lagging"], metrics["ingest_lag"]) == (1, 0.0)
    assert (stats["lagging"], stats["ingest_lag"]) == (1, 0.0)
    assert (counts["FAILED"], counts["ALIVE"]) == (2, 198)


def test_the_monitor_ends_an_episode_when_it_stops_and_validates_the_option() -> None:
    clock = hw.ManualClock()

    rec = LagRecorder()
    mon = HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[rec], lag_threshold=0.5)
    mon.start()
    clock.advance(3.0)
    mon.detector.note_intake(True, 2.0)  # read up to 1.0
    clock.advance(0.5)
    mon.stop()
    names = [type(e).__name__ for e in rec.events]
    assert names == ["Started", "Lagging", "CaughtUp", "Stopped"]
    assert rec.events[2] == CaughtUp(duration=0.5, max_lag=2.5, at=3.5)
    assert mon.detector.lag == 0.0
    mon.lag_threshold = None
    assert mon.lag_threshold is None and mon.detector.lag_threshold is None
    bad_values: list[tuple[Any, type[Exception]]] = [
        (0, ValueError),
        (-1.0, ValueError),
        (True, TypeError),
        ("1", TypeError),
    ]
    for bad, exc in bad_values:
        with pytest.raises(exc, match="lag_threshold"):
            HeartbeatMonitor(None, "svc.>", clock=clock, lag_threshold=bad)
        with pytest.raises(exc, match="lag_threshold"):
            mon.lag_threshold = bad


def test_the_prometheus_exporter_has_the_lag_gauge() -> None:
    pytest.importorskip("prometheus_client")
    from heartwire.metrics import serve
    from tests.monitor.test_metrics import scrape

    clock = hw.ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", clock=clock)
    with mon:
        clock.advance(3.0)
        mon.detector.note_intake(True, 1.5)
        clock.advance(0.5)
        with serve(mon, 0, "127.0.0.1") as server:
            got = scrape(server.port)
    assert got['heartwire_ingest_lag_seconds{pattern="svc.>"}'] == 2.0
    assert got['heartwire_lagging_total{pattern="svc.>"}'] == 1


def test_alerts_and_wall_fields_of_the_lag_events() -> None:
    import json

    from heartwire.events import wall_fields

    broker = MemoryBroker()
    clock = hw.ManualClock()
    got: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/topic/alerts", on_message=got.append).start()
    alerts = hw.AlertListener(hw.ReliableSender(broker, "/topic/alerts"))
    mon = HeartbeatMonitor(broker, "svc.>", clock=clock, wall_offset=1000.0, listeners=[alerts])
    mon.start()
    clock.advance(4.0)
    mon.detector.note_intake(True, 2.0)  # 2 s behind at 4
    clock.advance(1.0)
    mon.detector.note_intake(False)
    mon.stop()
    bodies = [json.loads(m.body) for m in got]
    assert [(b["alert"], b["at_monotonic"], b["at"]) for b in bodies] == [
        ("lagging", 4.0, 1004.0),
        ("caught_up", 5.0, 1005.0),
    ]
    assert bodies[0]["lag"] == 2.0
    assert (bodies[1]["duration"], bodies[1]["max_lag"]) == (1.0, 3.0)
    assert wall_fields(Lagging(2.0, 4.0, wall_offset=1000.0)) == {
        "lag": 2.0,
        "at": 1004.0,
        "at_iso": "1970-01-01T00:16:44.000000Z",
        "at_monotonic": 4.0,
    }


def test_the_watermark_never_goes_back_and_stop_start_clears_the_hold() -> None:
    clock, det, q = rig()
    clock.advance(10.0)
    det.add("a")  # due at 11
    det.note_intake(True, 3.0)  # read up to 7
    clock.advance(0.5)
    det.note_intake(True, 4.0)  # 6.5: older than what was read, ignored
    assert det.lag == pytest.approx(3.5)
    det.note_intake(True)  # no transit: stays at 7
    clock.advance(4.0)  # 14.5: `a`'s deadline (11) is past the clock, not the watermark
    events = q.try_pop()
    assert failed(events) == []
    assert [repr(e) for e in events] == ["Event(lagging, at=10, lag=3)"]
    assert det.status("a").state == "PENDING" and det.lag == pytest.approx(7.5)
    det.note_intake(True, 3.4)  # read up to 11.1
    clock.advance(0.001)
    assert failed(q.try_pop()) == [("a", 1, 11.0)]
    det.stop()  # ends the episode
    assert [repr(e) for e in q.try_pop()] == [
        "Event(caught_up, at=14.501, duration=4.501, max_lag=7.5)"
    ]
    assert det.lag == 0.0
    det.note_intake(True, 5.0)  # stopped: not held
    assert det.lag == 0.0
    clock.advance(1.0)
    det.start()  # 15.501: `a` due a period later, judged at the clock
    clock.advance(1.001)
    assert failed(q.try_pop()) == [("a", 2, pytest.approx(16.501))]
    assert det.stats()["lagging"] == 1
