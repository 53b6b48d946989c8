"""The steady-state feed shared by ``steady`` and ``threads``: a feeder thread beating the
topics in slices spread over each period.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from measure import pace


def feeder(
    beat: Callable[[Any], object],
    slices_all: list[Any],
    slices_ok: list[Any],
    period: float,
    stop: threading.Event,
) -> threading.Thread:
    """A thread beating slice i of the topics at i/len(slices) of every period; the failing
    topics beat only in the first period (so their deadlines are spread over the period)."""

    def run() -> None:
        t0 = time.monotonic()
        per = len(slices_all)
        k = 0
        while not stop.is_set():
            slices = slices_all if k == 0 else slices_ok
            base = t0 + k * period
            for i in range(per):
                pace(base + i * period / per)
                if stop.is_set():
                    return
                beat(slices[i])
            k += 1

    thread = threading.Thread(target=run, name="feeder", daemon=True)
    thread.start()
    return thread


# Feeder batches per period: 97, not 100, so that batch times (every 10.3 ms) drift across the
# monitors' 10 ms ticks and the silent topics' deadlines fall at every phase of a tick.
BATCHES = 97


def steady_slices(
    keys: list[Any], fail_every: int, per_period: int, convert: Callable[[list[Any]], Any]
) -> tuple[list[Any], list[Any]]:
    size = -(-len(keys) // per_period)
    parts = [keys[i * size : (i + 1) * size] for i in range(per_period)]
    ok = [[k for j, k in enumerate(p, i * size) if j % fail_every] for i, p in enumerate(parts)]
    return [convert(p) for p in parts], [convert(p) for p in ok]
