"""Where the alerting policy (silences, dependencies, flapping) meets explicit failure (down
beats) and the monitor's other readers, through a monitor (embedded broker, manual clock):
exact event streams, with each failed event's reason and marks read together."""

from __future__ import annotations

from typing import Any

from heartwire.events import EventBatch, Failed, Flapping, Resumed, wall_fields
from heartwire.listeners import SubscriberListener
from heartwire.status import status_snapshot
from tests.monitor.test_monitor_semantics import Recorder, make_rig, ms


class Full(Recorder):
    """Failed/resumed/flapping: (kind, topic, missed, at ms, silenced, suppressed_by, reason)."""

    def on_flapping(self, event: Flapping) -> None:
        self.events.append(event)

    def take(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for e in self.events:
            if isinstance(e, Failed):
                out.append(
                    ("failed", e.topic, e.missed, ms(e.at), e.silenced, e.suppressed_by, e.reason)
                )
            elif isinstance(e, Resumed):
                out.append(("resumed", e.topic, e.missed, ms(e.at), e.silenced, e.suppressed_by))
            elif isinstance(e, Flapping):
                out.append(("flapping", e.topic, e.flapping, ms(e.at)))
        self.events.clear()
        return out


class Columns(SubscriberListener):
    """Reads the failed events' columns of each batch: (topic, silenced, parent, reason)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, str, str | None]] = []
        self.paged: list[tuple[str, str | None]] = []

    def on_events(self, batch: EventBatch) -> None:
        failed = batch.of_kinds(["failed"])
        self.rows.extend(
            zip(
                failed.topic_list(),
                failed.silenced.tolist(),
                failed.suppressed_by_list(),
                failed.reason_list(),
                strict=True,
            )
        )
        # What a pager leaving marked events out keeps: the reasons stay with their events.
        kept = failed.without_marked()
        self.paged.extend(zip(kept.topic_list(), kept.reason_list(), strict=True))


def rig_with(*listeners: SubscriberListener, **options: Any) -> Any:
    gen = make_rig(recorder=Full(), **options)
    r = next(gen)
    for extra in listeners:
        r.mon.add_listener(extra)
    return r, gen


def test_a_down_beat_for_a_silenced_topic_is_marked_and_its_owed_alert_keeps_the_reason() -> None:
    cols = Columns()
    r, gen = rig_with(cols)
    try:
        r.mon.start()
        r.send("svc.db", period=1.0)
        r.mon.silence("svc.db", duration=2.5, reason="upgrade")
        r.clock.advance(0.3)
        r.send("svc.db", period=1.0, state="down", reason="disk full")
        assert r.advance(1.9) == [  # t = 2.2
            ("failed", "svc.db", 0, 300, True, None, "disk full"),
            ("failed", "svc.db", 1, 1000, True, None, "disk full"),
            ("failed", "svc.db", 2, 2000, True, None, "disk full"),
        ]
        # The silence ends at 2.5, between deadlines: the alert owed, unmarked, with its reason.
        assert r.advance(1.0) == [
            ("failed", "svc.db", 2, 2500, False, None, "disk full"),
            ("failed", "svc.db", 3, 3000, False, None, "disk full"),
        ]
        assert r.mon.stats()["released"] == 1
        assert cols.rows == [
            ("svc.db", 1, "", "disk full"),
            ("svc.db", 1, "", "disk full"),
            ("svc.db", 1, "", "disk full"),
            ("svc.db", 0, "", "disk full"),
            ("svc.db", 0, "", "disk full"),
        ]
        assert cols.paged == [("svc.db", "disk full")] * 2
    finally:
        gen.close()


def test_a_down_beat_on_a_child_of_a_failed_parent_is_suppressed_and_released_with_it() -> None:
    cols = Columns()
    r, gen = rig_with(cols)
    try:
        r.mon.start()
        r.mon.depends("svc.api", on="svc.db")
        r.clock.advance(0.1)
        r.send("svc.db", period=1.0)
        r.send("svc.api", period=1.0)
        r.clock.advance(0.95)
        r.send("svc.api", period=1.0)  # api's next deadline: 2.05
        assert r.advance(0.15) == [("failed", "svc.db", 1, 1100, False, None, None)]
        r.clock.advance(0.1)  # t = 1.3
        r.send("svc.api", period=1.0, state="down", reason="db unreachable")
        assert r.take() == [("failed", "svc.api", 0, 1300, False, "svc.db", "db unreachable")]
        r.clock.advance(0.3)  # t = 1.6: db resumes, api (still down) is alerted then
        r.send("svc.db", period=1.0)
        assert r.take() == [
            ("resumed", "svc.db", 1, 1600, False, None),
            ("failed", "svc.api", 0, 1600, False, None, "db unreachable"),
        ]
        assert cols.rows == [
            ("svc.db", 0, "", None),
            ("svc.api", 0, "svc.db", "db unreachable"),
            ("svc.api", 0, "", "db unreachable"),
        ]
        assert cols.paged == [("svc.db", None), ("svc.api", "db unreachable")]
    finally:
        gen.close()


def test_down_beats_flap_and_the_failure_delivered_at_settling_keeps_the_reason() -> None:
    r, gen = rig_with(flap_threshold=2, flap_window=10.0)
    try:
        r.mon.start()
        for n in range(3):  # three outages by down beats: down at n + 0.2, up at n + 0.3
            r.clock.set(n + 0.2)
            r.send("svc.a", period=1.0, state="down", reason=f"down {n}")
            r.clock.set(n + 0.3)
            r.send("svc.a", period=1.0)
        r.clock.set(3.2)
        r.send("svc.a", period=1.0, state="down", reason="for good")  # held: flapping
        assert r.take() == [
            ("failed", "svc.a", 0, 200, False, None, "down 0"),
            ("resumed", "svc.a", 0, 300, False, None),
            ("failed", "svc.a", 0, 1200, False, None, "down 1"),
            ("resumed", "svc.a", 0, 1300, False, None),
            ("failed", "svc.a", 0, 2200, False, None, "down 2"),
            ("flapping", "svc.a", True, 2300),
        ]
        # Settles 10 s after its last transition (3.2), between deadlines (x.3): its failure
        # is delivered then, with the newest reason, as is the next deadline's.
        r.clock.set(13.4)
        got = r.take()
        assert got == [
            ("flapping", "svc.a", False, 13200),
            ("failed", "svc.a", 10, 13200, False, None, "for good"),
            ("failed", "svc.a", 11, 13300, False, None, "for good"),
        ]
    finally:
        gen.close()


def test_wall_fields_of_a_released_failure_carry_the_reason_and_no_unset_marks() -> None:
    r, gen = rig_with()
    events: list[Failed] = []

    class Keep(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            events.append(event)

    r.mon.add_listener(Keep())
    try:
        r.mon.start()
        r.mon.silence("svc.>", duration=0.5)
        r.clock.advance(0.2)
        r.send("svc.a", period=1.0, state="down", reason="no disk")
        r.clock.advance(0.5)  # the silence ended at 0.5
        assert r.mon.drain(5.0)
        marked, released = (wall_fields(e) for e in events)
        assert (marked["silenced"], marked["reason"]) == (True, "no disk")
        assert "suppressed_by" not in marked
        assert released["reason"] == "no disk"
        assert "silenced" not in released and "suppressed_by" not in released
        assert released["at_monotonic"] == 0.5
    finally:
        gen.close()


def test_status_snapshot_reads_the_monitors_own_silences_and_dependencies() -> None:
    r, gen = rig_with(wall_offset=1_000.0)
    try:
        r.mon.start()
        s = r.mon.silence("svc.db.>", duration=30, reason="maintenance")
        r.mon.depends("svc.api.>", on="svc.db")
        r.mon.depends("svc.web.>", on="svc.cache")
        r.send("svc.db", period=1.0)
        r.send("svc.cache", period=1.0)
        r.clock.advance(0.5)
        r.send("svc.db", period=1.0, state="down", reason="x")
        snap = status_snapshot(r.mon)
        assert [(row.pattern, row.until, row.reason, row.id) for row in snap.silences] == [
            ("svc.db.>", 1_030.0, "maintenance", str(s.id))
        ]
        assert [(row.children, row.parent, row.since) for row in snap.suppressions] == [
            ("svc.api.>", "svc.db", 1_000.5)
        ]
    finally:
        gen.close()
