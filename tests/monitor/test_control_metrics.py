"""Signed control messages in ``metrics()`` and the Prometheus export: taken by op, refused by
reason, every label present from the start (bounded: 2 ops, 8 reasons)."""

from __future__ import annotations

from typing import Any

import pytest

import heartwire as hw
from heartwire.control import CONTROL_REASONS, CONTROL_TOPIC, send_silence, send_unsilence

KEY = "control-key"


def _scrape(mon: hw.HeartbeatMonitor) -> dict[tuple[str, str], float]:
    prom = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from heartwire.metrics import collector

    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(collector(mon))
    text = prom.generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("op") or s.labels.get("reason", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("heartwire_control")
    }


def test_control_messages_are_counted_in_metrics_and_prometheus() -> None:
    closing: list[Any] = []
    broker = hw.connect()
    try:
        mon = hw.HeartbeatMonitor(broker, "svc.>", period=1.0, key=KEY, clock=hw.ManualClock())
        closing.append(mon)
        mon.start()
        zero = _scrape(mon)
        assert zero == {
            **{("heartwire_control_messages_total", op): 0 for op in ("silence", "unsilence")},
            **{("heartwire_control_refused_total", r): 0 for r in CONTROL_REASONS},
        }
        sent = send_silence(broker, "svc.db.>", duration="30m", key=KEY, reason="upgrade")
        send_unsilence(broker, sent.id, key=KEY)
        send_silence(broker, "svc.>", duration="30m", key="wrong-key")  # bad_signature
        broker.publish(CONTROL_TOPIC, b"{not json")  # malformed
        assert mon.drain(5.0)
        m = mon.metrics()
        assert m["control"] == {"silence": 1, "unsilence": 1}
        assert m["control_refused"]["bad_signature"] == 1
        assert m["control_refused"]["malformed"] == 1
        assert sum(m["control_refused"].values()) == 2
        assert set(m["control_refused"]) == CONTROL_REASONS
        got = _scrape(mon)
        assert got[("heartwire_control_messages_total", "silence")] == 1
        assert got[("heartwire_control_messages_total", "unsilence")] == 1
        assert got[("heartwire_control_refused_total", "bad_signature")] == 1
        assert got[("heartwire_control_refused_total", "malformed")] == 1
        assert got[("heartwire_control_refused_total", "replayed")] == 0
    finally:
        for c in closing:
            c.stop()
        broker.close()


def test_a_monitor_without_a_key_exports_the_control_series_as_zero() -> None:
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, clock=hw.ManualClock())
    m = mon.metrics()
    assert m["control"] == {"silence": 0, "unsilence": 0}
    assert m["control_refused"] == dict.fromkeys(sorted(CONTROL_REASONS), 0)
