"""The driver thread on the real clock: bounded waits, no sleeps-and-hope."""

from __future__ import annotations

import threading
import time

import heartwire as hw


def test_driver_detects_silence_and_the_beat_path_resumes() -> None:
    det = hw.core.Detector(period=0.05, tick=0.005)
    events = det.subscribe()
    try:
        det.add("svc.a")
        first = events.pop(timeout=5.0)
        assert first, "no event within 5 s of a 50 ms period"
        assert (first[0].kind, first[0].topic, first[0].missed) == ("failed", "svc.a", 1)
        # Detected after the deadline, and not absurdly late (the tick is 5 ms).
        assert first[0].at <= det.now()
        assert det.beat("svc.a")
        kinds: list[str] = []
        deadline = time.monotonic() + 5.0
        while "resumed" not in kinds and time.monotonic() < deadline:
            kinds.extend(e.kind for e in events.pop(timeout=0.5))
        assert "resumed" in kinds
    finally:
        det.stop()


def test_a_topic_beating_on_time_from_another_thread_never_fails() -> None:
    det = hw.core.Detector(period=0.2, allowed_misses=2, tick=0.005)
    events = det.subscribe()
    det.add("steady")
    stop = threading.Event()

    def publish() -> None:
        while not stop.is_set():
            det.beat("steady")
            stop.wait(0.02)

    beater = threading.Thread(target=publish)
    beater.start()
    try:
        det.add("silent")  # a control topic, so the test knows the driver is running
        got = events.pop(timeout=5.0)
        assert got and all(e.topic == "silent" for e in got)
        assert det.status("steady").state == "ALIVE"
    finally:
        stop.set()
        beater.join()
        det.stop()
    assert det.counts()["STOPPED"] == 2
    assert time.monotonic() - det.status("steady").last_seen < 60  # same frame as time.monotonic


def test_stop_is_idempotent_and_start_restarts_the_driver() -> None:
    det = hw.core.Detector(period=0.02, tick=0.002)
    events = det.subscribe()
    det.stop()
    det.stop()
    det.add("svc.a")
    det.start()
    assert events.pop(timeout=5.0), "restarted driver produced nothing"
    det.stop()


def test_a_handler_holding_the_gil_does_not_stop_detection() -> None:
    """The driver is a Rust thread: a handler spinning in Python for a second holds the GIL
    nearly all that time, yet missed periods keep being counted, each exactly once, in order."""
    det = hw.core.Detector(period=0.02, tick=0.002)
    hog_queue, watch = det.subscribe(), det.subscribe()
    hogging = threading.Event()

    def hog(batch: list[hw.core.Event]) -> None:
        if not hogging.is_set():
            hogging.set()
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                pass

    dispatcher = hw.core.Dispatcher(hog_queue, hog).start()
    try:
        det.add("silent")
        assert hogging.wait(5.0), "the hog handler never ran"
        dispatcher.stop(timeout=10.0)  # returns once the one-second spin is over
        missed = det.status("silent").missed
    finally:
        det.stop()
    # A second of 20 ms periods went by while the handler spun: ~50 more misses were counted.
    assert missed >= 25, f"only {missed} missed periods counted while a handler held the GIL"
    counts = [e.missed for e in watch.try_pop(100_000)]
    assert counts[: len(counts)] == list(range(1, len(counts) + 1)), "gaps or repeats in failed(n)"
    assert len(counts) >= 25
