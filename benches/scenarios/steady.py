"""A whole monitor at steady state: CPU and detection lateness, heartwire against the baselines."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

from baselines import AsyncioMonitor, HeapMonitor
from measure import dist, sample_window

from scenarios import scenario
from scenarios.feed import BATCHES, feeder, steady_slices


@scenario
def steady(
    impl: str, n: int, fail_every: int, period: float, tick_s: float, warmup: float, window: float
) -> dict[str, Any]:
    """A whole monitor at steady state: ``n`` topics beating every ``period`` (beats fed in 97
    batches a period from a feeder thread, transport excluded), one topic in ``fail_every``
    silent after its first beat (so it fails every period). CPU% of the process over ``window``,
    and detection lateness: when the listener heard of a failure minus the deadline."""
    import asyncio

    import numpy as np

    import heartwire as hw

    lateness: list[float] = []
    stop = threading.Event()
    grace = 0.1 * period
    keys = list(range(n))
    cleanup: list[Callable[[], object]] = []
    if impl == "heartwire":

        class Listener(hw.SubscriberListener):
            def on_failed(self, ev: Any) -> None:
                lateness.append(time.monotonic() - ev.at)

        mon = hw.HeartbeatMonitor(None, "svc.>", period=period, listeners=[Listener()], tick=tick_s)
        handles = [mon.expect(f"svc.steady.{i:07d}") for i in keys]
        mon.start()
        cleanup.append(mon.stop)
        convert: Callable[[list[Any]], Any] = lambda p: np.asarray(p, dtype=np.uint32)  # noqa: E731
        keys = handles
        beat: Callable[[Any], object] = mon.beat_handles
    elif impl == "heap":

        def on_failed(key: Any, missed: int, since: float, deadline: float) -> None:
            lateness.append(time.monotonic() - deadline)

        heapmon = HeapMonitor(period, 1, grace, on_failed=on_failed)
        heapmon.add_many(keys)
        ticker = threading.Thread(target=heapmon.run, args=(stop, tick_s), daemon=True)
        ticker.start()
        convert = list
        beat = heapmon.beat_many
    elif impl == "asyncio":

        def on_failed_a(key: Any, missed: int, since: float, deadline: float) -> None:
            lateness.append(time.monotonic() - deadline)

        loop = asyncio.new_event_loop()
        amon = AsyncioMonitor(loop, period, 1, grace, on_failed=on_failed_a)
        threading.Thread(target=loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result()
        loop.call_soon_threadsafe(amon.add_many, keys)
        cleanup.append(lambda: loop.call_soon_threadsafe(loop.stop))
        convert = list
        beat = lambda batch: loop.call_soon_threadsafe(amon.beat_many, batch)  # noqa: E731
    elif impl == "null":  # the feeder alone, beating nothing: the harness's own cost
        convert = list
        beat = lambda batch: None  # noqa: E731
    else:
        raise ValueError(impl)
    slices_all, slices_ok = steady_slices(keys, fail_every, BATCHES, convert)
    gc.collect()
    feeder(beat, slices_all, slices_ok, period, stop)
    out, samples = sample_window(lateness, warmup, window)
    stop.set()
    for fn in cleanup:
        fn()
    expected = (n // fail_every) * window / period
    return {
        "impl": impl,
        "n": n,
        **out,
        "lateness": dist(samples),
        "failed_events": len(samples),
        "failed_expected": expected,
    }
