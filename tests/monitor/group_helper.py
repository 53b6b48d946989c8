"""Processes of the monitor group takeover test (``python -m tests.monitor.group_helper``).

``member``: a :class:`~heartwire.groups.MonitorGroupMember` of ``<group>.>`` (period 1 s) on a real
broker; writes JSON lines to ``--out``: its ``failed`` / ``resumed`` events (wall times) and
``owned`` each time the shards it owns change (wall time of the change seen, polled every
50 ms). ``publisher``: beats ``--topics`` topics ``<group>.t<i>`` every period to the group's
shards; once the file ``--stop-file`` exists it stops beating ``<group>.t0`` ...
``<group>.t<dead-1>`` and writes ``{"event": "stopped", "at": <wall>}``. Both run until
killed (SIGTERM ends them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from typing import Any

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.events import Failed, Resumed
from heartwire.groups import MonitorGroupMember, ShardLayout
from heartwire.transport.stomp import StompTransport

_out_lock = threading.Lock()


class Out:
    def __init__(self, path: str) -> None:
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115  (the process's life)

    def emit(self, **fields: Any) -> None:
        with _out_lock:
            self._f.write(json.dumps(fields) + "\n")
            self._f.flush()


class Reporter(hw.SubscriberListener):
    def __init__(self, out: Out) -> None:
        self.out = out

    def on_failed(self, event: Failed) -> None:
        self.out.emit(
            event="failed",
            topic=event.topic,
            missed=event.missed,
            at=event.wall_at,
            since=event.wall_since,
        )

    def on_resumed(self, event: Resumed) -> None:
        self.out.emit(event="resumed", topic=event.topic, missed=event.missed, at=event.wall_at)


def member(args: argparse.Namespace) -> None:
    out = Out(args.out)
    layout = ShardLayout(args.group, args.shards)
    transport = hw.connect(args.url)
    assert isinstance(transport, StompTransport)
    mon = hw.HeartbeatMonitor(
        None, f"{args.group}.>", period=args.period, grace=args.grace, listeners=[Reporter(out)]
    )
    m = MonitorGroupMember(transport, mon, layout, member=args.name).start()
    out.emit(event="started", at=time.time(), pid=os.getpid())
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    last: frozenset[int] | None = None
    seen = 0
    while not done.wait(0.05):
        taken = list(m.taken)
        for shard, by, topics, failed, at in taken[seen:]:
            out.emit(event="taken", shard=shard, by=by, topics=topics, failed=failed, at=at)
        seen = len(taken)
        owned = m.owned
        if owned != last:
            out.emit(event="owned", shards=sorted(owned), at=time.time())
            last = owned
    out.emit(
        event="stats",
        takeovers=m.takeovers,
        releases=m.releases,
        refused=m.refused,
        slowest=m.slowest,
        at=time.time(),
    )
    m.stop()
    transport.close()


def publisher(args: argparse.Namespace) -> None:
    out = Out(args.out)
    layout = ShardLayout(args.group, args.shards)
    transport = hw.connect(args.url)
    assert isinstance(transport, StompTransport)
    codec = BeatCodec()
    topics = [f"{args.group}.t{i}" for i in range(args.topics)]
    dead = set(topics[: args.dead])
    stopped = False
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    out.emit(event="started", at=time.time(), pid=os.getpid())
    while not done.is_set():
        start = time.monotonic()
        if not stopped and os.path.exists(args.stop_file):
            stopped = True
            out.emit(event="stopped", at=time.time())
        for topic in topics:
            if stopped and topic in dead:
                continue
            body = codec.encode(Beat(topic, sent_at=time.time(), period=args.period))
            transport.publish_sharded(layout, topic, body)
        spent = time.monotonic() - start
        if spent > 1.5 * args.period:  # the members' grace (1 s) covers less
            out.emit(event="late", spent=spent, at=time.time())
        done.wait(max(0.0, args.period - spent))
    transport.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("member", "publisher"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", default="m")
    parser.add_argument("--period", type=float, default=1.0)
    # A second of grace: one Python publisher beating 2000 topics on a loaded machine has a
    # jitter of a few tenths of a second (the default grace is a tenth of the period).
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--dead", type=int, default=20)
    parser.add_argument("--stop-file", default="")
    args = parser.parse_args()
    (member if args.role == "member" else publisher)(args)


if __name__ == "__main__":
    main()
