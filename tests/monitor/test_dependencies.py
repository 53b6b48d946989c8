"""Dependencies under the manual clock: children held back while their parent is down, one
alert per outage of the parent, and the children still down alerted when it resumes first."""

from __future__ import annotations

import pytest

from tests.monitor.test_silences import Pager, rig_with


def test_a_parent_that_resumes_before_its_children_releases_those_still_down() -> None:
    pager = Pager()
    r, gen = rig_with(pager)
    try:
        r.mon.depends("svc.api.>", on="svc.db")
        assert r.mon.dependencies() == [("svc.api.>", "svc.db")]
        r.mon.start()
        for topic in ("svc.db", "svc.api.x", "svc.api.y"):
            r.send(topic)
        # The parent and its children miss the same deadline: the children are held back
        # whichever the driver judged first.
        assert sorted(r.advance(1.5)) == [
            ("failed", "svc.api.x", 1, 1000, False, "svc.db"),
            ("failed", "svc.api.y", 1, 1000, False, "svc.db"),
            ("failed", "svc.db", 1, 1000, False, None),
        ]
        assert pager.take() == [("failed", "svc.db", 1, 1000, False, None)]  # one alert
        r.send("svc.api.y")  # y comes back while the parent is down: quietly, as it failed
        assert r.take() == [("resumed", "svc.api.y", 1, 1500, False, "svc.db")]
        assert sorted(r.advance(0.7)) == [
            ("failed", "svc.api.x", 2, 2000, False, "svc.db"),
            ("failed", "svc.db", 2, 2000, False, None),
        ]
        assert pager.take() == [("failed", "svc.db", 2, 2000, False, None)]
        r.send("svc.db")  # the parent resumes first: x, still down, is alerted now
        assert r.take() == [
            ("resumed", "svc.db", 2, 2200, False, None),
            ("failed", "svc.api.x", 2, 2200, False, None),
        ]
        assert pager.take() == [
            ("resumed", "svc.db", 2, 2200, False, None),
            ("failed", "svc.api.x", 2, 2200, False, None),
        ]
        r.send("svc.api.x")
        assert r.take() == [("resumed", "svc.api.x", 2, 2200, False, None)]  # alerted: unmarked
        stats = r.mon.stats()
        assert (stats["suppressed"], stats["released"]) == (4, 1)  # 3 failed + 1 resumed
    finally:
        gen.close()


def test_children_learned_after_the_rule_and_a_parent_learned_last() -> None:
    r, gen = rig_with()
    try:
        r.mon.depends("svc.api.*", on="svc.db")
        r.mon.start()
        r.send("svc.api.x")  # the parent is not known yet
        r.send("svc.db")
        r.clock.advance(1.5)
        got = r.take()
        assert ("failed", "svc.api.x", 1, 1000, False, "svc.db") in got
        assert ("failed", "svc.db", 1, 1000, False, None) in got
    finally:
        gen.close()


def test_bad_dependencies_name_the_argument() -> None:
    r, gen = rig_with()
    try:
        with pytest.raises(ValueError, match=r"on 'svc\.\*'"):
            r.mon.depends("svc.api.>", on="svc.*")
        with pytest.raises(ValueError, match="child_pattern"):
            r.mon.depends("svc..api", on="svc.db")
        assert r.mon.dependencies() == []
    finally:
        gen.close()
