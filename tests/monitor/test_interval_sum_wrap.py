"""Review of issue 17 (metrics): the inter-arrival histogram's _sum must never go backwards."""

from __future__ import annotations

from tests.monitor.test_monitor_semantics import make_rig


def test_interval_sum_does_not_wrap() -> None:
    """sum_ns is a u64 of nanoseconds (wrapping add): 1.8e19 ns in total wraps. At 1 M topics
    beating every second that is 1e15 ns a second: about 5 hours of uptime."""
    for r in make_rig(period=1e9):
        det = r.mon.detector
        det.count_intervals = True
        r.mon.expect("svc.a")
        r.mon.expect("svc.b")
        r.mon.start()
        r.mon.beat("svc.a")
        r.mon.beat("svc.b")
        r.clock.set(1e10)  # each topic's next beat is 1e19 ns after its first
        r.mon.beat("svc.a")
        _, _, first = det.interval_histogram()
        r.mon.beat("svc.b")
        _, counts, total = det.interval_histogram()
        assert sum(counts) == 2
        assert total >= first, (first, total)  # a counter's sum never goes back
        assert abs(total - 2e10) < 1.0, total
