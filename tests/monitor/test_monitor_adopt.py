"""HeartbeatMonitor.adopt (docs/groups-design.md §3, "Carrying a topic over"): the member taking
a shard over gives live topics a fresh start and carries FAILED outages on, with what the old
owner's listeners were told. Exact event streams under the ManualClock (grace 0: exact
deadlines); times in whole milliseconds."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

import heartwire as hw
from heartwire.events import Failed, Flapping, Resumed
from heartwire.groups import ShardLayout, ShardSnapshot, TopicRecord
from tests.monitor.test_monitor_semantics import Recorder, Rig, make_rig, ms

TAKEOVER = 10.0


class Marked(Recorder):
    """Failed and resumed with their marks; flapping too."""

    def on_flapping(self, event: Flapping) -> None:
        self.events.append(event)

    def take(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for e in self.events:
            if isinstance(e, Failed):
                out.append(
                    (
                        "failed",
                        e.topic,
                        e.missed,
                        ms(e.at),
                        ms(e.since),
                        e.silenced,
                        e.suppressed_by,
                    )
                )
            elif isinstance(e, Resumed):
                out.append(
                    (
                        "resumed",
                        e.topic,
                        e.missed,
                        ms(e.at),
                        ms(e.downtime),
                        e.silenced,
                        e.suppressed_by,
                    )
                )
            elif isinstance(e, Flapping):
                out.append(("flapping", e.topic, e.flapping, ms(e.at)))
            else:
                out.append(("other", type(e).__name__))
        self.events.clear()
        return out


def _member(**options: Any) -> Iterator[Rig]:
    for rig in make_rig(recorder=Marked(), **options):
        rig.mon.start()
        assert rig.take() == [("other", "Started")]
        assert rig.advance(TAKEOVER) == []
        yield rig


@pytest.fixture
def member() -> Iterator[Rig]:
    yield from _member()


def failed(rig: Rig, topic: str, since: float, missed: int, **marks: Any) -> TopicRecord:
    """The old owner's record of ``topic``: FAILED since ``since`` on the rig's clock."""
    return TopicRecord(topic, rig.mon.wall_time(since), missed, None, 1.0, **marks)


def test_a_snapshot_gives_live_topics_a_full_period_of_their_own(member: Rig) -> None:
    layout = ShardLayout("g", 1)
    snap = ShardSnapshot(
        layout, 0, "old", 3, 0.0, (TopicRecord("svc.a", period=2.0), TopicRecord("svc.b"))
    )
    handles = member.mon.adopt(snap)
    assert handles == [member.mon.handle("svc.a"), member.mon.handle("svc.b")]
    assert member.mon.status("svc.a").period == 2.0
    assert member.advance(1.001) == [("failed", "svc.b", 1, 11000, 11000, False, None)]
    assert member.advance(1.0) == [
        ("failed", "svc.a", 1, 12000, 12000, False, None),
        ("failed", "svc.b", 2, 12000, 11000, False, None),
    ]


def test_a_carried_outage_counts_on_and_resumes_with_the_downtime_from_its_start(
    member: Rig,
) -> None:
    member.mon.adopt([failed(member, "svc.old", 5.0, 5)])
    assert member.take() == []
    st = member.mon.status("svc.old")
    assert (st.state, st.missed, ms(st.failed_since)) == ("FAILED", 5, 5000)
    assert member.advance(2.001) == [
        ("failed", "svc.old", 6, 11000, 5000, False, None),
        ("failed", "svc.old", 7, 12000, 5000, False, None),
    ]
    member.clock.advance(0.299)
    member.send("svc.old", period=1.0)  # 12.3
    assert member.take() == [("resumed", "svc.old", 7, 12300, 7300, False, None)]


def test_a_topic_heard_before_the_snapshot_was_read_resumes_at_that_beat(member: Rig) -> None:
    member.send("svc.old", period=1.0)  # 10.0: auto-learned, its beats on this member already
    member.clock.advance(0.2)
    member.mon.adopt([failed(member, "svc.old", 5.0, 5)])
    assert member.take() == [("resumed", "svc.old", 5, 10000, 5000, False, None)]
    assert member.mon.status("svc.old").state == "ALIVE"


def test_an_alerted_outage_is_not_alerted_again_when_a_silence_here_ends() -> None:
    for rig in _member():
        rig.mon.silence("svc.old", duration=1.5)  # 10.0 to 11.5
        rig.mon.adopt([failed(rig, "svc.old", 5.0, 5)])
        assert rig.advance(2.2) == [
            ("failed", "svc.old", 6, 11000, 5000, True, None),
            ("failed", "svc.old", 7, 12000, 5000, False, None),  # its deadline, nothing at 11.5
        ]


def test_a_silenced_outage_owes_its_alert_when_the_silence_here_ends() -> None:
    for rig in _member():
        rig.mon.silence("svc.old", duration=1.5)
        rig.mon.adopt([failed(rig, "svc.old", 5.0, 5, alerted=False, silenced=True)])
        assert rig.advance(1.6) == [
            ("failed", "svc.old", 6, 11000, 5000, True, None),
            ("failed", "svc.old", 6, 11500, 5000, False, None),  # the owed alert
        ]


def test_a_silenced_outage_not_silenced_here_alerts_at_its_next_deadline_or_resumes_marked(
    member: Rig,
) -> None:
    member.mon.adopt(
        [
            failed(member, "svc.a", 5.0, 5, alerted=False, silenced=True),
            failed(member, "svc.b", 5.0, 5, alerted=False, silenced=True),
        ]
    )
    member.clock.advance(0.5)
    member.send("svc.b", period=1.0)
    assert member.take() == [("resumed", "svc.b", 5, 10500, 5500, True, None)]
    assert member.advance(0.501) == [("failed", "svc.a", 6, 11000, 5000, False, None)]


def test_a_child_suppressed_by_its_parent_stays_so_and_alerts_when_the_parent_resumes(
    member: Rig,
) -> None:
    member.mon.depends("svc.api.>", on="svc.db")
    member.mon.adopt(
        [
            failed(member, "svc.db", 5.0, 5),
            failed(member, "svc.api.x", 6.0, 4, alerted=False, suppressed_by="svc.db"),
        ]
    )
    assert member.take() == []
    assert sorted(member.advance(1.001)) == [
        ("failed", "svc.api.x", 5, 11000, 6000, False, "svc.db"),
        ("failed", "svc.db", 6, 11000, 5000, False, None),
    ]
    member.clock.advance(0.399)
    member.send("svc.db", period=1.0)  # 11.4
    assert member.take() == [
        ("resumed", "svc.db", 6, 11400, 6400, False, None),
        ("failed", "svc.api.x", 5, 11400, 6000, False, None),
    ]


def test_a_flapping_topic_flaps_on_and_settles_one_window_after_the_takeover() -> None:
    for rig in _member(flap_threshold=2, flap_window=5.0):
        rig.mon.adopt([failed(rig, "svc.old", 5.0, 5, flapping=True)])
        assert rig.advance(4.999) == []  # held back while it flaps
        assert rig.advance(0.002) == [
            ("flapping", "svc.old", False, 15000),
            ("failed", "svc.old", 10, 15000, 5000, False, None),
        ]


def test_an_outage_older_than_the_monitor_keeps_its_since_one_before_the_clock_starts_at_0() -> (
    None
):
    clock = hw.ManualClock(100.0)
    rec = Marked()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[rec], grace=0.0)
    try:
        mon.start()
        mon.adopt(
            [
                TopicRecord("svc.a", mon.wall_time(40.0), 2, None, 1.0),
                TopicRecord("svc.b", mon.wall_time(-30.0), 2, None, 1.0),
            ]
        )
        clock.advance(1.001)
        assert mon.drain(5.0)
        assert rec.take()[1:] == [
            ("failed", "svc.a", 3, 101000, 40000, False, None),
            ("failed", "svc.b", 3, 101000, 0, False, None),
        ]
    finally:
        mon.stop()


def test_a_since_after_now_counts_as_now(member: Rig) -> None:
    member.mon.adopt([failed(member, "svc.old", 12.0, 1)])  # the old owner's clock ahead
    assert member.advance(1.001) == [("failed", "svc.old", 2, 11000, 10000, False, None)]


@pytest.mark.parametrize(
    ("record", "error", "text"),
    [
        ("svc.a", TypeError, "records[1] must be a TopicRecord, got str"),
        (TopicRecord("other.a"), ValueError, "records[1].topic 'other.a' does not match"),
        (TopicRecord("svc.a", 1.0, 0), ValueError, "records[1].missed"),
        (TopicRecord("svc.a", math.nan, 1), ValueError, "records[1].failed_since"),
        (TopicRecord("svc.a", period=0.0), ValueError, "records[1].period"),
        (
            TopicRecord("svc.a", 1.0, 1, suppressed_by="svc.>"),
            ValueError,
            "records[1].suppressed_by",
        ),
        (TopicRecord("svc.a", 1.0, 1, silenced=1), TypeError, "records[1].silenced must be a bool"),  # type: ignore[arg-type]
        (TopicRecord("_hw.x"), ValueError, "records[1].topic '_hw.x' is one of heartwire's own"),
    ],
)
def test_a_bad_record_raises_naming_it_and_nothing_is_adopted(
    member: Rig, record: Any, error: type[Exception], text: str
) -> None:
    with pytest.raises(
        error, match=text.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")
    ):
        member.mon.adopt([TopicRecord("svc.ok"), record])
    assert len(member.mon) == 0


def test_adopt_needs_a_started_monitor_and_records() -> None:
    for rig in make_rig():
        with pytest.raises(RuntimeError, match="adopt needs a started monitor"):
            rig.mon.adopt([TopicRecord("svc.a")])
        rig.mon.start()
        with pytest.raises(TypeError, match="records must be a ShardSnapshot or an iterable"):
            rig.mon.adopt(3)
        assert rig.mon.adopt([]) == []


class Reasons(hw.SubscriberListener):
    def __init__(self) -> None:
        self.seen: list[Failed] = []

    def on_failed(self, event: Failed) -> None:
        self.seen.append(event)


def test_an_explicit_failure_keeps_its_reason() -> None:
    for rig in _member(allowed_misses=3):
        reasons = Reasons()
        rig.mon.add_listener(reasons)
        rec = TopicRecord("svc.db", rig.mon.wall_time(5.0), 2, "disk full", 1.0)
        rig.mon.adopt([rec])
        rig.advance(2.001)  # a `down` outage fails at every period, whatever allowed_misses
        assert [(e.missed, ms(e.at), ms(e.since), e.reason) for e in reasons.seen] == [
            (3, 11000, 5000, "disk full"),
            (4, 12000, 5000, "disk full"),
        ]
        with pytest.raises(ValueError, match=r"records\[0\]\.reason must be 1 to 256"):
            rig.mon.adopt([TopicRecord("svc.x", 1.0, 1, "x" * 257)])


def test_an_outage_is_not_carried_to_a_paused_topic(member: Rig) -> None:
    member.mon.expect("svc.p", period=1.0)
    member.mon.pause("svc.p")
    with pytest.raises(ValueError, match=r"records\[1\]\.topic 'svc\.p' is paused"):
        member.mon.adopt([TopicRecord("svc.ok"), failed(member, "svc.p", 5.0, 2)])
    assert "svc.ok" not in member.mon
    member.mon.adopt([TopicRecord("svc.p")])  # a fresh start leaves it paused
    assert member.mon.status("svc.p").state == "PAUSED"
