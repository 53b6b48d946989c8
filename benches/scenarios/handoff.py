"""Listener hand-off latency, with and without a slow listener beside."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from measure import dist, pace, sample_window

from scenarios import scenario


@scenario
def handoff(impl: str, slow: bool, rate: int, warmup: float, window: float) -> dict[str, Any]:
    """Listener hand-off: a feeder beats ``rate`` times a second (round robin over 1000 topics),
    a fast listener records (call time - beat time) for each ``received`` event. One more topic
    never beats, so it fails every second; with ``slow``, a second listener sleeps 1 s in each
    ``on_failed``. Baseline: a ``queue.SimpleQueue`` and one consumer thread calling the
    listeners in turn."""
    import heartwire as hw

    samples: list[float] = []
    names = [f"svc.hand.{i:04d}" for i in range(1000)]
    stop = threading.Event()
    if impl == "heartwire":

        class Fast(hw.SubscriberListener):
            def on_received(self, ev: Any) -> None:
                samples.append(time.monotonic() - ev.at)

        class Slow(hw.SubscriberListener):
            def on_failed(self, ev: Any) -> None:
                time.sleep(1.0)

        listeners: list[Any] = [Fast()] + ([Slow()] if slow else [])
        mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, listeners=listeners)
        for x in names:
            mon.expect(x)
        mon.expect("svc.hand.silent")
        mon.start()
        beat: Callable[[str], object] = mon.beat

        def finish() -> None:
            mon.stop(timeout=0.5)

    elif impl == "queue":
        q: queue.SimpleQueue[tuple[str, str, float]] = queue.SimpleQueue()

        def fast(kind: str, key: str, at: float) -> None:
            if kind == "received":
                samples.append(time.monotonic() - at)

        def slow_cb(kind: str, key: str, at: float) -> None:
            if kind == "failed":
                time.sleep(1.0)

        callbacks = [fast] + ([slow_cb] if slow else [])

        def consume() -> None:
            while True:
                item = q.get()
                for cb in callbacks:
                    cb(*item)

        def silent() -> None:
            t = time.monotonic() + 1.1
            while not stop.is_set():
                pace(t)
                q.put(("failed", "svc.hand.silent", t))
                t += 1.0

        threading.Thread(target=consume, daemon=True).start()
        threading.Thread(target=silent, daemon=True).start()
        beat = lambda name: q.put(("received", name, time.monotonic()))  # noqa: E731
        finish = stop.set
    else:
        raise ValueError(impl)

    def feed() -> None:
        t = time.monotonic()
        i = 0
        while not stop.is_set():
            pace(t)
            beat(names[i % 1000])
            i += 1
            t += 1.0 / rate

    threading.Thread(target=feed, daemon=True).start()
    out, got = sample_window(samples, warmup, window)
    stop.set()
    finish()
    return {"impl": impl, "slow": slow, "rate": rate, **out, "handoff": dist(got)}
