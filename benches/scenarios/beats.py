"""Beats/s from Python: single calls and whole batches, heartwire against the baselines."""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable
from typing import Any

from baselines import AsyncioMonitor, HeapMonitor, load_pypi_phi
from measure import interleaved, median, rss_bytes, topic_name

from scenarios import scenario


@scenario
def beats(
    n: int, rounds: int, single_calls: int, monitor: bool, asyncio_: bool, phi: bool
) -> dict[str, Any]:
    """Beats/s from Python into ``n`` topics: single calls and whole batches.

    heartwire runs on the real clock (driver thread on, period 1 h so nothing expires), like the
    baselines, which read ``time.monotonic()``. Single calls go to ``single_calls`` distinct
    topics picked at random (the same ones for every contender).
    """
    import asyncio

    import numpy as np
    import pyarrow as pa

    import heartwire as hw

    setup = time.perf_counter()
    names = [topic_name(i) for i in range(n)]
    det = hw.core.Detector(period=3600.0)
    handles = det.add_many(names)
    np_handles = np.asarray(handles, dtype=np.uint32)
    arrow_names = pa.array(names, type=pa.string())
    heap = HeapMonitor(period=3600.0)
    heap.add_many(names)
    picks = random.Random(7).sample(range(n), single_calls)
    s_names = [names[i] for i in picks]
    s_handles = [handles[i] for i in picks]

    single: dict[str, Callable[[], object]] = {}

    def hw_handle() -> None:
        beat = det.beat
        for h in s_handles:
            beat(h)

    def hw_name() -> None:
        beat = det.beat
        for x in s_names:
            beat(x)

    def heap_beat() -> None:
        beat = heap.beat
        for x in s_names:
            beat(x)

    single["hw.Detector.beat(handle)"] = hw_handle
    single["hw.Detector.beat(name)"] = hw_name
    single["HeapMonitor.beat(name)"] = heap_beat

    mon = None
    if monitor:
        mon = hw.HeartbeatMonitor(None, "svc.>", period=3600.0)
        for x in names:
            mon.expect(x)
        mon.start()

        def mon_name() -> None:
            beat = mon.beat
            for x in s_names:
                beat(x)

        single["hw.HeartbeatMonitor.beat(name)"] = mon_name

    loop = None
    if asyncio_:
        loop = asyncio.new_event_loop()
        amon = AsyncioMonitor(loop, period=3600.0)
        loop.run_until_complete(asyncio.sleep(0))
        amon.add_many(names)

        async def async_beats() -> None:
            beat = amon.beat
            for x in s_names:
                beat(x)
            await asyncio.sleep(0)  # the loop's own upkeep of the cancelled timers

        def asyncio_beat() -> None:
            loop.run_until_complete(async_beats())

        single["AsyncioMonitor.beat(name)"] = asyncio_beat

    if phi:
        pypi_phi = load_pypi_phi()
        det_phi = hw.core.Detector(period=3600.0)
        det_phi.add_many(names, phi=hw.core.Phi())
        det_phi.beat_many(names)

        def hw_phi() -> None:
            beat = det_phi.beat
            for x in s_names:
                beat(x)

        single["hw.Detector.beat(name) [phi]"] = hw_phi
        if pypi_phi is not None:
            pypi = {
                x: pypi_phi(
                    threshold=8.0,
                    max_sample_size=1000,
                    min_std_deviation_ms=100,
                    acceptable_heartbeat_pause_ms=3000,
                    first_heartbeat_estimate_ms=1000,
                )
                for x in s_names
            }
            for d in pypi.values():
                d.heartbeat()

            def pypi_beat() -> None:
                for x in s_names:
                    pypi[x].heartbeat()

            single["pypi PhiAccrualFailureDetector.heartbeat()"] = pypi_beat

    reps = max(1, 1_000_000 // n)

    def repeat(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(reps):
                fn()

        return run

    def heap_loop() -> None:
        beat = heap.beat
        for x in names:
            beat(x)

    batch: dict[str, Callable[[], object]] = {
        "hw.Detector.beat_handles(numpy)": repeat(lambda: det.beat_handles(np_handles)),
        "hw.Detector.beat_many(list)": repeat(lambda: det.beat_many(names)),
        "hw.Detector.beat_many(arrow)": repeat(lambda: det.beat_many(arrow_names)),
        "HeapMonitor.beat_many(names)": repeat(lambda: heap.beat_many(names)),
        "HeapMonitor.beat(name) loop": repeat(heap_loop),
    }
    setup = time.perf_counter() - setup

    s_times = interleaved(single, rounds)
    b_times = interleaved(batch, rounds)
    # Names as they come off the wire: new str objects each time (no cached hash, not the very
    # objects the dict was built with), made outside the timed call.
    fresh: dict[str, Callable[[list[str]], object]] = {
        "hw.Detector.beat_many(list)": det.beat_many,
        "HeapMonitor.beat_many(names)": heap.beat_many,
    }
    f_times: dict[str, list[float]] = {k: [] for k in fresh}
    f_reps = max(1, 100_000 // n)
    for r in range(rounds + 1):
        for key, fn in fresh.items():
            copies = [[x.encode().decode() for x in names] for _ in range(f_reps)]
            gc.collect()
            t = time.perf_counter()
            for batch_names in copies:
                fn(batch_names)
            if r:
                f_times[key].append(time.perf_counter() - t)
            del copies
    assert det.stats()["unknown"] == 0
    if mon is not None:
        mon.stop()
    if loop is not None:
        loop.close()
    det.stop()
    return {
        "n": n,
        "setup_s": setup,
        "single_calls": single_calls,
        "batch_reps": reps,
        "single": {k: single_calls / t for k, t in s_times.items()},
        "batch": {k: n * reps / t for k, t in b_times.items()},
        "batch_fresh": {k: n * f_reps / median(t) for k, t in f_times.items()},
        "rss_mb": rss_bytes() / 2**20,
    }
