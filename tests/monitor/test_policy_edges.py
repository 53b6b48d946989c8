"""The alerting policy's edges found in the review of issue 17, through a monitor on a manual
clock: a flap settling under a silence, a dependency cycle, a parent removed while FAILED, a
flap settling up with an alert left open. Each failed before its fix."""

from __future__ import annotations

from typing import Any

from heartwire.events import Failed, Flapping, Resumed
from tests.monitor.test_monitor_semantics import Recorder, make_rig, ms


class Full(Recorder):
    def on_flapping(self, event: Flapping) -> None:
        self.events.append(event)

    def take(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for e in self.events:
            if isinstance(e, Failed):
                out.append(("failed", e.topic, e.missed, ms(e.at), e.silenced, e.suppressed_by))
            elif isinstance(e, Resumed):
                out.append(("resumed", e.topic, e.missed, ms(e.at), e.silenced, e.suppressed_by))
            elif isinstance(e, Flapping):
                out.append(("flapping", e.topic, e.flapping, ms(e.at)))
        self.events.clear()
        return out


def flap(r: Any, cycles: int) -> None:
    for n in range(cycles):
        r.clock.set(n * 1.5 + 1.1)
        r.clock.set(n * 1.5 + 1.5)
        r.send("svc.a")


def _flapped_down_under_silence(r: Any) -> Any:
    r.mon.expect("svc.a")
    r.mon.start()
    s = r.mon.silence("svc.a", duration=100.0, reason="maint")
    flap(r, 3)
    r.clock.set(16.0)  # down since 5.5, settles at 15.5 (held meanwhile)
    got = r.take()
    assert ("flapping", "svc.a", False, 15500) in got
    failed = [e for e in got if e[0] == "failed" and e[3] >= 15500]
    assert failed and all(e[4] is True for e in failed), got  # every failed silenced
    return s


def test_settled_flap_under_silence_resumes_marked() -> None:
    """Every Failed of the outage was silenced, so its Resumed must be silenced too
    (docs/silences.md: 'no resolution of an alert it never got')."""
    for r in make_rig(recorder=Full(), flap_threshold=2, flap_window=10.0):
        _flapped_down_under_silence(r)
        r.clock.set(20.2)
        r.send("svc.a")
        got = [e for e in r.take() if e[0] == "resumed"]
        assert got and got[0][4] is True, got


def test_settled_flap_under_silence_gets_its_owed_alert_when_unsilenced() -> None:
    """A silence removed while the topic is FAILED and never alerted: one unsilenced Failed at
    that moment (docs/silences.md), counted in released."""
    for r in make_rig(recorder=Full(), flap_threshold=2, flap_window=10.0):
        s = _flapped_down_under_silence(r)
        r.clock.set(20.2)
        r.take()
        assert r.mon.unsilence(s) is True
        got = r.take()
        assert ("failed", "svc.a", 15, 20200, False, None) in got, got
        assert r.mon.stats()["released"] == 1


def test_a_dependency_cycle_still_alerts_once() -> None:
    """a depends on b and b on a; both miss the same deadlines: one unmarked Failed at each
    (before the fix each marked the other and nothing was alerted while both stayed down)."""
    for r in make_rig(recorder=Full()):
        r.mon.depends("svc.a", on="svc.b")
        r.mon.depends("svc.b", on="svc.a")
        r.mon.expect("svc.a")
        r.mon.expect("svc.b")
        r.mon.start()
        got = r.advance(5.5)
        unmarked = [e for e in got if e[0] == "failed" and e[5] is None and not e[4]]
        assert unmarked, got


def test_a_child_suppressed_by_a_parent_that_is_removed_is_alerted_then() -> None:
    """The parent stops being FAILED by removal: a child still down and never alerted owes its
    alert then (as when the parent resumes), not at its next deadline."""
    for r in make_rig(recorder=Full(), period=10.0):
        r.mon.depends("svc.api", on="svc.db")
        r.mon.expect("svc.db")
        r.mon.expect("svc.api")
        r.mon.start()
        got = r.advance(10.5)
        assert ("failed", "svc.api", 1, 10000, False, "svc.db") in got, got
        r.mon.remove("svc.db")
        r.clock.advance(0.1)
        got = r.take()
        assert [e for e in got if e[0] == "failed" and e[1] == "svc.api" and e[5] is None], got


def test_a_flap_that_settles_up_resolves_the_alert_it_left_open() -> None:
    """flap_hold: the Resumed that starts flapping is held back (counted in held); when the
    topic settles healthy, the Failed at 4.0 its listeners got is resolved by a Resumed then
    (before the fix it stayed open forever: settling only sent a Failed if down)."""
    for r in make_rig(recorder=Full(), flap_threshold=2, flap_window=10.0):
        r.mon.expect("svc.a")
        r.mon.start()
        flap(r, 3)
        t = 4.5
        while t < 20.0:  # healthy from 4.5 on
            t += 0.5
            r.clock.set(t)
            r.send("svc.a")
        got = r.take()
        assert ("flapping", "svc.a", False, 14500) in got, got
        paging = [e for e in got if e[0] in ("failed", "resumed")]
        assert paging[-1] == ("resumed", "svc.a", 1, 14500, False, None), paging
        assert r.mon.stats()["held"] == 1


def test_a_child_suppressed_by_a_parent_paused_while_failed_is_alerted_then() -> None:
    """Pausing the parent ends its marks as removing it does: the child's alert goes out then,
    and its later failures are unmarked (until the parent is watched and FAILED again)."""
    for r in make_rig(recorder=Full(), period=10.0):
        r.mon.depends("svc.api", on="svc.db")
        r.mon.expect("svc.db")
        r.mon.expect("svc.api")
        r.mon.start()
        got = r.advance(10.5)
        assert ("failed", "svc.api", 1, 10000, False, "svc.db") in got, got
        assert r.mon.pause("svc.db") is True
        r.clock.advance(0.1)
        assert r.take() == [("failed", "svc.api", 1, 10500, False, None)]  # at the pause
        assert r.mon.stats()["released"] == 1
        assert r.advance(10.0) == [("failed", "svc.api", 2, 20000, False, None)]
