"""One tick in which 1M topics expire at once: the core, a whole monitor, the heap baseline."""

from __future__ import annotations

import gc
import time
from typing import Any

from baselines import HeapMonitor
from measure import median, topic_name

from scenarios import scenario


def failure_counter() -> Any:
    """A listener counting ``failed`` events: through ``on_events`` (whole batches, issue 15)
    when the listener class has it, else one ``on_failed`` call each."""
    import heartwire as hw

    base: Any = hw.SubscriberListener
    if hasattr(base, "on_events"):

        class Batches(base):  # type: ignore[misc,valid-type]
            api = "on_events"
            failed = 0

            def on_events(self, batch: Any) -> None:
                count = getattr(batch, "count", None)
                if callable(count) and not isinstance(batch, list):
                    self.failed += count("failed")
                else:
                    self.failed += sum(1 for e in batch if type(e).__name__ == "Failed")

        return Batches()

    class Calls(base):  # type: ignore[misc,valid-type]
        api = "on_failed"
        failed = 0

        def on_failed(self, event: Any) -> None:
            self.failed += 1

    return Calls()


@scenario
def tick(n: int, rounds: int, rearm: bool, monitor: bool = False) -> dict[str, Any]:
    """One tick in which ``n`` topics expire at once: heartwire's core vs the heap baseline.

    ``fail_all``: nobody beat, each topic counts a missed period, fails, and its event is queued
    (heartwire: into a subscriber queue with room for every event; baseline: a list). ``rearm_all``:
    every topic beat, so each is only re-armed from its beat. ``monitor``: the same mass failure
    through a whole ``HeartbeatMonitor`` (default settings, ManualClock), timed from the advance
    until ``drain()`` returns, i.e. one listener counted every failure (:func:`failure_counter`).
    """
    import heartwire as hw

    names = [topic_name(i) for i in range(n)]
    start, period, grace = 1000.0, 1.0, 0.1
    past = start + period + grace + 0.002

    def hw_fail() -> float:
        clock = hw.ManualClock(start)
        det = hw.core.Detector(clock=clock, period=period, grace=grace)
        det.add_many(names)
        q = det.subscribe(capacity=1 << 21)
        gc.collect()
        t = time.perf_counter()
        clock.advance(past - start)
        dt = time.perf_counter() - t
        assert det.stats()["failed"] == n and len(q) == n, (det.stats(), len(q))
        return dt

    def hw_rearm() -> float:
        clock = hw.ManualClock(start)
        det = hw.core.Detector(clock=clock, period=period, grace=grace)
        handles = det.add_many(names)
        det.beat_handles(handles, now=start + period / 2)
        gc.collect()
        t = time.perf_counter()
        clock.advance(past - start)
        dt = time.perf_counter() - t
        assert det.stats()["failed"] == 0
        return dt

    def heap_fail() -> float:
        events: list[tuple[Any, ...]] = []
        append = events.append
        mon = HeapMonitor(period, 1, grace, on_failed=lambda k, m, s, d: append((k, m, s, d)))
        mon.add_many(names, now=start)
        gc.collect()
        t = time.perf_counter()
        missed = mon.tick(past)
        dt = time.perf_counter() - t
        assert missed == n and len(events) == n
        return dt

    def heap_rearm() -> float:
        mon = HeapMonitor(period, 1, grace)
        mon.add_many(names, now=start)
        mon.beat_many(names)  # at the real monotonic time, far past `start`: all beaten
        gc.collect()
        t = time.perf_counter()
        missed = mon.tick(past)
        dt = time.perf_counter() - t
        assert missed == 0
        return dt

    delivered: list[int] = []
    api: list[str] = []

    def mon_fail() -> float:
        clock = hw.ManualClock(start)
        listener = failure_counter()
        mon = hw.HeartbeatMonitor(
            None, "svc.>", period=period, grace=grace, clock=clock, listeners=[listener]
        )
        mon.start()
        expect_many = getattr(mon, "expect_many", None)
        if expect_many is not None:
            expect_many(names)
        else:  # expect() one by one takes seconds at 1M; the detector's add_many is the same
            mon.detector.add_many(names)
        assert len(mon) == n, len(mon)
        gc.collect()
        t = time.perf_counter()
        clock.advance(past - start)
        drained = mon.drain(timeout=300)
        dt = time.perf_counter() - t
        delivered.append(listener.failed if drained else -1)
        api.append(listener.api)
        mon.stop()
        return dt

    fns = dict(hw_fail=hw_fail, heap_fail=heap_fail)
    if monitor:
        fns["mon_fail"] = mon_fail
    if rearm:
        fns.update(hw_rearm=hw_rearm, heap_rearm=heap_rearm)
    runs: dict[str, list[float]] = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            runs[key].append(fn())
            gc.collect()
    out = {"n": n, "rounds": rounds, **{k: median(v) for k, v in runs.items()}, "runs": runs}
    if monitor:
        out.update(mon_delivered=min(delivered), mon_api=api[0])
    return out
