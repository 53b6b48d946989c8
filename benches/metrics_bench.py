"""A Prometheus scrape's per-topic series with many topics: the core's bounded selection
(``mon.series_topics(max_topic_series)``) against the way it was done before (every topic's
status as a Python object, sorted FAILED first then by name, cut to the bound), in the same run
(issue 17, review finding 9).

::

    .venv/bin/python benches/metrics_bench.py               # 1 000 000 topics, ~1 min
    .venv/bin/python benches/metrics_bench.py --n 100000    # shorter

1% of the topics are FAILED. Also a whole scrape (``generate_latest``) with ``per_topic=True``
and ``max_topic_series=1000``. Figures are medians of interleaved rounds; read the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import heartwire as hw
from heartwire.events import TopicStatus


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each contender, run in turn round after round (plus one warm-up)."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds + 1):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            if r:
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


def before(mon: hw.HeartbeatMonitor, bound: int) -> tuple[list[TopicStatus], int]:
    """What metrics.py did per scrape before: every status, sorted, cut."""
    statuses = mon.statuses()
    total = len(statuses)
    statuses.sort(key=lambda s: (s.state.name != "FAILED", s.topic))
    del statuses[bound:]
    return statuses, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="topics (default 1 000 000)")
    parser.add_argument("--bound", type=int, default=1000, help="max_topic_series")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, bound = args.n, args.bound

    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, grace=0, clock=clock, max_topics=n + 1)
    names = [f"svc.g{i % 100}.t{i}" for i in range(n)]
    mon.start()
    mon.beat_many(names)
    clock.advance(0.5)
    alive = [name for i, name in enumerate(names) if i % 100]
    mon.beat_many(alive)
    clock.advance(0.7)  # 1% FAILED at 1 s
    new, total = mon.series_topics(bound)
    old, old_total = before(mon, bound)
    assert total == old_total == n and [s.topic for s in new] == [s.topic for s in old]
    assert sum(s.state == hw.State.FAILED for s in new) == min(bound, n // 100)

    print(f"{n} topics, 1% FAILED, max_topic_series={bound}; medians of {args.rounds} rounds")
    res = interleaved(
        {
            "series_topics": lambda: mon.series_topics(bound),
            "statuses+sort": lambda: before(mon, bound),
        },
        args.rounds,
    )
    print(
        f"selection: mon.series_topics {res['series_topics'] * 1e3:8.2f} ms   "
        f"statuses()+sort (before) {res['statuses+sort'] * 1e3:8.2f} ms   "
        f"ratio {res['statuses+sort'] / res['series_topics']:.0f}x"
    )
    try:
        import prometheus_client
    except ImportError:
        print("scrape: prometheus_client not installed, skipped")
        return
    from heartwire.metrics import collector

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(collector(mon, per_topic=True, max_topic_series=bound))
    res = interleaved({"scrape": lambda: prometheus_client.generate_latest(registry)}, 3)
    print(f"scrape:    generate_latest, per_topic=True   {res['scrape'] * 1e3:8.2f} ms")
    mon.stop()


if __name__ == "__main__":
    main()
