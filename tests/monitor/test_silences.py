"""Silences under the manual clock: marked events, listeners that leave them out, the alert a
still-failed topic owes when its silence ends, and the API's checks."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from heartwire.events import EventBatch, Failed, Resumed
from heartwire.listeners import SubscriberListener
from heartwire.policy import Silence, parse_duration
from tests.monitor.test_monitor_semantics import Recorder, ms


class Marked(Recorder):
    """Failed/resumed with their marks: (kind, topic, missed, at ms, silenced, suppressed_by)."""

    def take(self) -> list[tuple[Any, ...]]:
        out = []
        for e in self.events:
            if isinstance(e, Failed | Resumed):
                kind = "failed" if isinstance(e, Failed) else "resumed"
                out.append((kind, e.topic, e.missed, ms(e.at), e.silenced, e.suppressed_by))
        self.events.clear()
        return out


class Pager(Marked):
    """Pages people: leaves silenced and suppressed events out."""

    include_silenced = False
    include_suppressed = False


class BatchPager(SubscriberListener):
    include_silenced = False

    def __init__(self) -> None:
        self.got: list[tuple[str, str, bool]] = []

    def on_events(self, batch: EventBatch) -> None:
        for e in batch:
            if isinstance(e, Failed | Resumed):
                self.got.append((type(e).__name__, e.topic, e.silenced))


def rig_with(*listeners: SubscriberListener, **options: Any) -> Any:
    from tests.monitor.test_monitor_semantics import make_rig

    gen = make_rig(recorder=Marked(), **options)
    r = next(gen)
    for extra in listeners:
        r.mon.add_listener(extra)
    return r, gen


def test_a_silence_ending_while_the_topic_is_failed_alerts_it_then() -> None:
    pager = Pager()
    r, gen = rig_with(pager)
    try:
        r.mon.expect("svc.db.main")
        r.mon.expect("svc.api")
        r.mon.start()
        s = r.mon.silence("svc.db.>", duration=2.5, reason="upgrade")
        assert (s.pattern, s.start, s.end, s.reason) == ("svc.db.>", 0.0, 2.5, "upgrade")
        assert r.mon.silences() == [s]
        assert r.advance(2.2) == [
            ("failed", "svc.db.main", 1, 1000, True, None),
            ("failed", "svc.db.main", 2, 2000, True, None),
            ("failed", "svc.api", 1, 1000, False, None),
            ("failed", "svc.api", 2, 2000, False, None),
        ]
        assert pager.take() == [
            ("failed", "svc.api", 1, 1000, False, None),
            ("failed", "svc.api", 2, 2000, False, None),
        ]
        # The silence ends at 2.5 with svc.db.main still FAILED: its alert goes out then, in
        # time order with the deadlines after it.
        assert r.advance(1.0) == [
            ("failed", "svc.db.main", 2, 2500, False, None),
            ("failed", "svc.db.main", 3, 3000, False, None),
            ("failed", "svc.api", 3, 3000, False, None),
        ]
        assert pager.take()[0] == ("failed", "svc.db.main", 2, 2500, False, None)
        assert r.mon.silences() == []
        stats = r.mon.stats()
        assert (stats["silenced"], stats["released"]) == (2, 1)
        r.send("svc.db.main")
        assert r.take() == [("resumed", "svc.db.main", 3, 3200, False, None)]
    finally:
        gen.close()


def test_an_outage_inside_the_silence_is_silenced_both_ways_and_pagers_see_nothing() -> None:
    pager, batch = Pager(), BatchPager()
    r, gen = rig_with(pager, batch)
    try:
        r.mon.start()
        r.send("svc.a")
        r.mon.silence("svc.*", duration=60)
        r.clock.advance(1.5)
        r.send("svc.a")
        assert r.take() == [
            ("failed", "svc.a", 1, 1000, True, None),
            ("resumed", "svc.a", 1, 1500, True, None),
        ]
        assert pager.take() == []
        assert batch.got == []
        assert r.mon.stats()["silenced"] == 2
    finally:
        gen.close()


def test_unsilence_alerts_a_still_failed_topic_at_once_and_new_topics_are_silenced() -> None:
    r, gen = rig_with()
    try:
        r.mon.start()
        s = r.mon.silence("svc.>", until=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
        assert 3590 < s.end < 3610
        r.send("svc.late")  # learned after the silence was made: silenced too
        assert r.advance(1.5) == [("failed", "svc.late", 1, 1000, True, None)]
        r.clock.advance(0.2)
        assert r.mon.unsilence(s) is True
        assert r.mon.unsilence(s.id) is False
        assert r.take() == [("failed", "svc.late", 1, 1700, False, None)]
        assert r.advance(0.4) == [("failed", "svc.late", 2, 2000, False, None)]
    finally:
        gen.close()


def test_a_topic_alerted_before_its_silence_is_not_alerted_again_and_resumes_unmarked() -> None:
    r, gen = rig_with()
    try:
        r.mon.start()
        r.send("svc.a")
        assert r.advance(1.5) == [("failed", "svc.a", 1, 1000, False, None)]
        r.mon.silence("svc.a", duration="1s")
        assert r.advance(1.0) == [("failed", "svc.a", 2, 2000, True, None)]
        assert r.advance(0.7) == [("failed", "svc.a", 3, 3000, False, None)]  # nothing at 2.5
        r.send("svc.a")
        assert r.take() == [("resumed", "svc.a", 3, 3200, False, None)]
        assert r.mon.stats()["released"] == 0
    finally:
        gen.close()


def test_bad_arguments_name_themselves() -> None:
    r, gen = rig_with()
    try:
        with pytest.raises(ValueError, match="exactly one of duration and until"):
            r.mon.silence("svc.>")
        with pytest.raises(ValueError, match="exactly one"):
            r.mon.silence("svc.>", duration=1, until=dt.datetime.now(dt.timezone.utc))
        with pytest.raises(ValueError, match="duration"):
            r.mon.silence("svc.>", duration=0)
        with pytest.raises(ValueError, match=r"duration.*'soon'"):
            r.mon.silence("svc.>", duration="soon")
        with pytest.raises(ValueError, match="aware"):
            r.mon.silence("svc.>", until=dt.datetime(2099, 1, 1))
        with pytest.raises(ValueError, match="future"):
            r.mon.silence("svc.>", until=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))
        with pytest.raises(ValueError, match=re.escape("pattern 'svc.>.x'")):
            r.mon.silence("svc.>.x", duration=1)
        with pytest.raises(TypeError, match="reason"):
            r.mon.silence("svc.>", duration=1, reason=3)  # type: ignore[arg-type]
        assert r.mon.silences() == []
    finally:
        gen.close()


def test_durations() -> None:
    assert [parse_duration(t) for t in ("30s", "30m", "2h", "1d", "1.5m", "90")] == [
        30.0,
        1800.0,
        7200.0,
        86400.0,
        90.0,
        90.0,
    ]
    for bad in ("", "0s", "-1m", "2w", "inf", "nan"):
        with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(")):
            parse_duration(bad)


def test_silence_times_on_the_wall_clock() -> None:
    s = Silence(1, "svc.>", 10.0, 70.0, "x", wall_offset=1_700_000_000.0)
    assert s.wall_end == 1_700_000_070.0
    assert s.end_utc == dt.datetime.fromtimestamp(1_700_000_070.0, tz=dt.timezone.utc)


def test_listeners_called_on_the_producing_thread_leave_marked_events_out_too() -> None:
    pager = Pager()
    r, gen = rig_with(pager, listener_queue=None)
    try:
        r.mon.expect("svc.a")
        r.mon.expect("svc.b")
        r.mon.start()
        r.mon.silence("svc.a", duration=60)
        r.clock.advance(1.5)
        assert r.mon.drain(5.0)
        assert pager.take() == [("failed", "svc.b", 1, 1000, False, None)]
        assert ("failed", "svc.a", 1, 1000, True, None) in r.take()
    finally:
        gen.close()
