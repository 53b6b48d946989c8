"""A monitor process for the SIGSTOP test (``python -m tests.monitor.local_pause_helper``).

On the embedded broker: two publishers beating at 0.2 s, ``svc.live`` and ``svc.dead``, and a
monitor of ``svc.>``. Once the monitor has heard both it prints ``{"event": "ready"}``. After
the process was stopped (SIGSTOP), ``svc.dead`` beats no more: its payload callable sees the
gap since its last call and fails from then on (silently), so it died during the stop. The
monitor's events are printed as JSON lines (times on the monotonic clock, the same in every
process); closing stdin stops everything and ends the process.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

import heartwire as hw
from heartwire.events import Failed, LocalPause, Resumed

_out = threading.Lock()


def emit(**fields: Any) -> None:
    with _out:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


class Reporter(hw.SubscriberListener):
    def on_failed(self, event: Failed) -> None:
        emit(event="failed", topic=event.topic, missed=event.missed, at=event.at)

    def on_resumed(self, event: Resumed) -> None:
        emit(event="resumed", topic=event.topic, missed=event.missed, at=event.at)

    def on_local_pause(self, event: LocalPause) -> None:
        emit(event="local_pause", duration=event.duration, at=event.at)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--period", type=float, default=0.2)
    parser.add_argument("--grace", type=float, default=0.1)
    parser.add_argument("--max-local-pause", type=float, default=1.0)
    args = parser.parse_args()

    dead = threading.Event()
    last_check = [time.monotonic()]

    def alive() -> bool:
        now = time.monotonic()
        if now - last_check[0] > 1.0:  # the process was frozen: die with the stop
            if not dead.is_set():
                emit(event="dead", at=now)
            dead.set()
        last_check[0] = now
        return not dead.is_set()

    broker = hw.connect()
    mon = hw.HeartbeatMonitor(
        broker,
        "svc.>",
        period=args.period,
        grace=args.grace,
        max_local_pause=args.max_local_pause,
        listeners=[Reporter()],
    )
    live = hw.HeartbeatPublisher(broker, "svc.live", period=args.period)

    def payload() -> None:
        if not alive():
            raise RuntimeError("died with the stop")

    # A failing payload sends nothing: from the wake-up on, svc.dead is silent. (Not a failing
    # dependency check: that would send a down beat, failing it at once; this test is about
    # the silence after a local pause.)
    doomed = hw.HeartbeatPublisher(broker, "svc.dead", period=args.period, payload=payload)
    with mon, live, doomed:
        deadline = time.monotonic() + 10.0
        while not all(t in mon and mon.status(t).state is hw.State.ALIVE for t in live_topics):
            if time.monotonic() > deadline:
                emit(event="error", detail="publishers not heard within 10 s")
                return 1
            time.sleep(0.01)
        emit(event="ready", at=time.monotonic())
        sys.stdin.read()  # until the test closes it
        mon.drain(5.0)
    emit(event="stats", **{k: v for k, v in mon.stats().items() if isinstance(v, (int, float))})
    return 0


live_topics = ("svc.live", "svc.dead")

if __name__ == "__main__":
    sys.exit(main())
