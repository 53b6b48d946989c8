"""Baseline 3: one thread per subscriber, on the same feed as ``steady``."""

from __future__ import annotations

import threading
import time
from typing import Any

from baselines import ThreadPerSubscriber
from measure import dist, rss_bytes, sample_window

from scenarios import scenario
from scenarios.feed import BATCHES, feeder, steady_slices


@scenario
def threads(n: int, period: float, fail_every: int, warmup: float, window: float) -> dict[str, Any]:
    """Baseline 3 at ``n`` topics: one thread per subscriber; same feed as ``steady``."""
    lateness: list[float] = []

    def on_failed(key: Any, missed: int, since: float, deadline: float) -> None:
        lateness.append(time.monotonic() - deadline)

    tps = ThreadPerSubscriber(period, 1, 0.1 * period, on_failed=on_failed)
    t = time.monotonic()
    started = tps.start(range(n))
    start_s = time.monotonic() - t
    stop = threading.Event()
    keys = list(range(started))
    slices_all, slices_ok = steady_slices(keys, fail_every, BATCHES, list)
    feeder(tps.beat_many, slices_all, slices_ok, period, stop)
    # Released once every topic has beaten once: their deadlines are spread over the period,
    # as for subscribers started at different times (not all waking in the same instant).
    time.sleep(period)
    tps.release()
    out, samples = sample_window(lateness, warmup, window)
    stop.set()
    tps.stop()
    return {
        "n": n,
        "started": started,
        "start_s": start_s,
        **out,
        "lateness": dist(samples),
        "failed_events": len(samples),
        "failed_expected": (started // fail_every) * window / period,
        "rss_mb": rss_bytes() / 2**20,
    }
