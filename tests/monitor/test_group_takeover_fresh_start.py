"""A monitor group's takeover with the monitor's API as it is (docs/groups-design.md §3), under
the manual clock: the member taking a shard over watches the shard's topics from the takeover
on (``expect``: the fresh start), so a live topic gets a full period and no false failure, and
a topic that died during the handover is reported one period after the takeover. A topic the
old owner had already reported FAILED stays FAILED without a new first failure: the monitor's
``adopt`` carries its outage over (the exact streams of every case: test_monitor_adopt.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heartwire.groups import TopicRecord
from tests.monitor.test_monitor_semantics import Rig, make_rig

TAKEOVER = 10.0


@pytest.fixture
def member() -> Iterator[Rig]:
    """A standby member (grace 0: exact deadlines), started at 0, watching nothing yet."""
    for rig in make_rig():
        rig.mon.start()
        assert rig.take() == [("started", "svc.>")]
        assert rig.advance(TAKEOVER) == []  # a standby: no topic, no event
        yield rig


def _take_over(rig: Rig, *topics: str) -> None:
    """What a member does with the old owner's snapshot at the takeover: watch every topic
    from now on, each a full period to be heard."""
    for topic in topics:
        rig.mon.expect(topic, period=1.0)


def test_takeover_gives_live_topics_a_full_period_and_reports_the_dead_one_period_later(
    member: Rig,
) -> None:
    _take_over(member, "svc.live", "svc.died")
    member.clock.advance(0.5)
    member.send("svc.live", period=1.0)  # 10.5: the live topic's beats keep coming
    assert member.advance(0.5) == []  # 11.0: exactly one period after the takeover, on time
    assert member.advance(0.001) == [("failed", "svc.died", 1, 11000, 11000)]
    member.clock.advance(0.399)
    member.send("svc.live", period=1.0)  # 11.4
    assert member.advance(0.9) == [("failed", "svc.died", 2, 12000, 11000)]  # 12.3
    st = member.mon.status("svc.live")
    assert (st.state.name, st.missed) == ("ALIVE", 0)


def test_a_topic_failed_before_the_takeover_fails_on_without_a_new_first_failure(
    member: Rig,
) -> None:
    # The old owner's snapshot: svc.old FAILED since 5.0, 5 periods missed.
    member.mon.adopt([TopicRecord("svc.old", member.mon.wall_time(5.0), 5, None, 1.0)])
    assert member.take() == []  # no new first failure at the takeover
    events = member.advance(1.001)
    assert events == [("failed", "svc.old", 6, 11000, 5000)]
