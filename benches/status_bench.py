"""One refresh of ``heartwire status`` with many topics, beside the obvious way, in the same run
(issue 17).

::

    .venv/bin/python benches/status_bench.py               # 100 000 topics, ~20 s
    .venv/bin/python benches/status_bench.py --n 10000     # shorter

- snapshot: :func:`heartwire.status.status_snapshot` (``mon.counts()`` and ``mon.worst(10)``:
  native passes, ten objects) against the same figures taken from ``mon.statuses()`` (one
  :class:`~heartwire.TopicStatus` per topic, counted and sorted in Python), with half the
  topics FAILED.
- worst: ``mon.worst(10)`` alone against ``sorted(mon.statuses())[:10]``.
- ring: :class:`heartwire.status.RecentEvents` taking one batch of a failure of every topic
  (``on_events``: the newest ``capacity`` events built) against a listener that builds every
  event of the batch (the default ``on_events``, an ``on_failed`` that appends to a deque);
  then a batch of repeats (each topic's next missed period), the ring's worst case: it reads
  every event's columns and keeps none.

Figures are medians of interleaved rounds; read the ratios, the absolute numbers come from a
shared, noisy machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable

import heartwire as hw
from heartwire.events import EventBatch, TopicStatus
from heartwire.status import RecentEvents, status_snapshot


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


def _badness(s: TopicStatus) -> tuple[bool, int, float]:
    since = s.failed_since if s.failed_since is not None else (s.last_seen or 0.0)
    return (s.state != hw.State.FAILED, -s.missed, since)


def naive_snapshot(mon: hw.HeartbeatMonitor, top: int) -> tuple[Counter[str], list[TopicStatus]]:
    """What a status view would do with the per-topic API: every status, counted and sorted."""
    all_ = mon.statuses()
    counts = Counter(str(s.state) for s in all_)
    late = [s for s in all_ if s.state == hw.State.FAILED or s.missed > 0]
    return counts, sorted(late, key=_badness)[:top]


class _EveryEvent(hw.SubscriberListener):
    def __init__(self, capacity: int) -> None:
        self.ring: deque[object] = deque(maxlen=capacity)

    def on_failed(self, event: hw.Failed) -> None:
        self.ring.append(event)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="topics (default 100 000)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    n = args.n

    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, grace=0, clock=clock)
    names = [f"svc.t{i}" for i in range(n)]
    mon.start()
    mon.beat_many(names)
    clock.advance(0.5)
    mon.beat_many(names[::2])
    clock.advance(0.7)  # the other half failed at 1 s
    snap = status_snapshot(mon)
    counts, worst = naive_snapshot(mon, 10)
    assert snap.states["FAILED"] == counts["FAILED"] == n // 2
    assert [o.topic for o in snap.offenders] == [s.topic for s in worst]

    print(f"{n} topics, half FAILED; medians of {args.rounds} interleaved rounds")
    res = interleaved(
        {
            "status_snapshot": lambda: status_snapshot(mon, top=10),
            "statuses()+sort": lambda: naive_snapshot(mon, 10),
        },
        args.rounds,
    )
    print(
        f"snapshot: status_snapshot {res['status_snapshot'] * 1e3:8.2f} ms   "
        f"statuses()+Counter+sort {res['statuses()+sort'] * 1e3:8.2f} ms   "
        f"ratio {res['statuses()+sort'] / res['status_snapshot']:.0f}x"
    )
    res = interleaved(
        {
            "worst": lambda: mon.worst(10),
            "sorted": lambda: sorted(mon.statuses(), key=_badness)[:10],
        },
        args.rounds,
    )
    print(
        f"worst:    mon.worst(10)   {res['worst'] * 1e3:8.2f} ms   "
        f"sorted(statuses())[:10] {res['sorted'] * 1e3:8.2f} ms   "
        f"ratio {res['sorted'] / res['worst']:.0f}x"
    )

    # One batch holding a failure of every topic (up to 65536, the dispatcher's batch size).
    det = hw.core.Detector(clock=hw.ManualClock(), period=1.0)
    queue = det.subscribe(capacity=1 << 20)
    size = min(n, 65536)
    det.add_many([f"svc.t{i}" for i in range(size)])
    det.advance(1.5)
    batch = EventBatch(queue.try_pop_batch(1 << 20), 0.0)
    assert len(batch) == size, len(batch)
    ring, every = RecentEvents(50), _EveryEvent(50)
    res = interleaved(
        {"ring": lambda: ring.on_events(batch), "every": lambda: every.on_events(batch)},
        args.rounds,
    )
    print(
        f"ring:     RecentEvents    {res['ring'] * 1e3:8.2f} ms   "
        f"every event built      {res['every'] * 1e3:8.2f} ms   "
        f"ratio {res['every'] / res['ring']:.0f}x   (one batch of {size} failures)"
    )
    # The worst case for the ring: a batch of repeats (every topic's second missed period),
    # none of them kept, so it looks at every event's columns.
    det.advance(2.5)
    repeats = EventBatch(queue.try_pop_batch(1 << 20), 0.0)
    assert len(repeats) == size and repeats[0].missed == 2, len(repeats)
    res = interleaved(
        {"ring": lambda: ring.on_events(repeats), "every": lambda: every.on_events(repeats)},
        args.rounds,
    )
    print(
        f"repeats:  RecentEvents    {res['ring'] * 1e3:8.2f} ms   "
        f"every event built      {res['every'] * 1e3:8.2f} ms   "
        f"ratio {res['every'] / res['ring']:.1f}x   (one batch of {size} repeated failures)"
    )
    mon.stop()


if __name__ == "__main__":
    main()
